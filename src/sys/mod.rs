//! The bottom layer: operating-system helpers every other module may use and that use no
//! other module of agx.

pub mod fsxattr;
