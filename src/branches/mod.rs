pub mod merge3;
