//! Real tools inside the mount, compared with the same work on a plain directory: git,
//! tar, cp -a, shell scripts building and removing deep trees, and concurrent writers.

mod common;
mod util;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::Mounted;
use util::{differing, git_ok, same, sh_out, snapshot, Entry, Snap, NO_PASSTHROUGH};

fn sh_ok(dir: &Path, script: &str) -> String {
    common::sh(dir, script)
}

/// Everything under `dir` except `.git`, without times.
fn worktree(dir: &Path) -> BTreeMap<PathBuf, Entry> {
    let mut s = snapshot(dir, Snap::default());
    s.retain(|k, _| !k.starts_with(".git"));
    s
}

// ---------------------------------------------------------------- git

fn git_flow(dir: &Path) -> Vec<String> {
    let mut log = Vec::new();
    git_ok(dir, &["init", "-q", "-b", "main"]);
    sh_ok(
        dir,
        "mkdir -p src bin && echo 'fn a() {}' > src/a.rs && echo 'fn b() {}' > src/b.rs && \
         printf 'readme\\n' > README && printf '#!/bin/sh\\necho run\\n' > bin/run.sh && \
         chmod +x bin/run.sh && ln -s README link",
    );
    git_ok(dir, &["add", "-A"]);
    git_ok(dir, &["commit", "-q", "-m", "one"]);
    let main_tree = worktree(dir);

    git_ok(dir, &["checkout", "-q", "-b", "feature"]);
    sh_ok(
        dir,
        "echo 'fn a2() {}' >> src/a.rs && rm src/b.rs && echo 'fn c() {}' > src/c.rs && \
         mkdir -p docs/deep && echo doc > docs/deep/x.md && chmod -x bin/run.sh && \
         rm link && ln -s src/a.rs link",
    );
    log.push(git_ok(dir, &["status", "--porcelain"]));
    git_ok(dir, &["add", "-A"]);
    git_ok(dir, &["commit", "-q", "-m", "two"]);
    let feature_tree = worktree(dir);

    // Switching branches rewrites the work tree both ways, and leaves it clean.
    git_ok(dir, &["checkout", "-q", "main"]);
    log.push(format!("main restored {}", worktree(dir) == main_tree));
    log.push(git_ok(dir, &["status", "--porcelain"]));
    git_ok(dir, &["checkout", "-q", "feature"]);
    log.push(format!(
        "feature restored {}",
        worktree(dir) == feature_tree
    ));
    log.push(git_ok(dir, &["status", "--porcelain"]));

    // Stash and pop a change.
    sh_ok(dir, "echo change >> README");
    git_ok(dir, &["stash", "-q"]);
    log.push(format!(
        "stashed: {:?}",
        git_ok(dir, &["status", "--porcelain"])
    ));
    git_ok(dir, &["stash", "pop", "-q"]);
    log.push(format!(
        "popped: {:?}",
        git_ok(dir, &["status", "--porcelain"])
    ));
    git_ok(dir, &["checkout", "--", "README"]);

    // Same commits everywhere (fixed identity and dates): same content, modes and links.
    log.push(git_ok(
        dir,
        &["rev-parse", "main", "feature", "HEAD^{tree}"],
    ));
    log.push(git_ok(dir, &["log", "--oneline", "--all"]));
    git_ok(dir, &["repack", "-adq"]);
    git_ok(dir, &["gc", "-q", "--prune=now"]);
    git_ok(dir, &["fsck", "--strict", "--no-progress"]);
    log.push(git_ok(dir, &["status", "--porcelain"]));
    log.push(format!("{:?}", worktree(dir).keys().collect::<Vec<_>>()));
    log
}

#[test]
fn git_init_add_commit_branch_switch_and_status() {
    let log = same(&[], git_flow);
    assert_eq!(
        log[0],
        " M bin/run.sh\n M link\n M src/a.rs\n D src/b.rs\n?? docs/\n?? src/c.rs\n"
    );
    assert!(log.contains(&"main restored true".to_string()), "{log:#?}");
    assert!(
        log.contains(&"feature restored true".to_string()),
        "{log:#?}"
    );
    assert!(
        log.contains(&"popped: \" M README\\n\"".to_string()),
        "{log:#?}"
    );
}

// ---------------------------------------------------------------- tar

/// A source tree with a few hundred files: sizes from empty to 200 KB, several modes,
/// symlinks, hard links, empty directories, and fixed times.
fn make_tree(root: &Path) {
    sh_ok(
        root,
        r#"set -e
        for d in $(seq 1 30); do
          mkdir -p "dir$d/sub"
          for f in $(seq 1 10); do
            head -c $(( (d * 37 + f * 101) % 4000 )) /dev/urandom > "dir$d/file$f.txt"
          done
          ln -s "file1.txt" "dir$d/link"
          ln "dir$d/file2.txt" "dir$d/sub/hard"
        done
        : > empty
        head -c 200000 /dev/urandom > big.bin
        mkdir -p emptydir "with space/and more"
        echo x > "with space/and more/f"
        chmod 600 dir1/file1.txt; chmod 755 dir2/file1.txt; chmod 444 dir3/file1.txt
        chmod 4755 dir4/file1.txt; chmod 2755 dir5/file1.txt; chmod 1777 emptydir
        chmod 700 dir6
        find . -exec touch -h -d '2021-06-07 08:09:10.123456789' {} +
        "#,
    );
}

#[test]
fn tar_extraction_matches_a_bare_extraction() {
    let src = tempfile::tempdir().unwrap();
    make_tree(&src.path().join("t").tap_mkdir());
    let tarball = src.path().join("tree.tar");
    sh_ok(
        src.path(),
        // pax keeps nanosecond times.
        &format!("tar --format=posix -C t -cf {} .", tarball.display()),
    );
    let opt = Snap {
        file_times: true,
        dir_times: true,
    };
    let want = snapshot(&src.path().join("t"), opt);
    assert!(want.len() > 350, "{}", want.len());
    for env in [&[][..], NO_PASSTHROUGH] {
        let got = same(env, |dir| {
            sh_ok(dir, &format!("tar -xpf {}", tarball.display()));
            snapshot(dir, opt)
        });
        assert_eq!(
            differing(&want, &got),
            Vec::<String>::new(),
            "extraction vs source"
        );
        // And archiving the mount again gives the same archive as the bare directory.
        let archives = same(env, |dir| {
            sh_ok(dir, &format!("tar -xpf {}", tarball.display()));
            sh_ok(dir, "tar --sort=name --format=gnu -cf - . | sha256sum")
        });
        assert_eq!(archives.len(), 68, "{archives}");
    }
}

trait TapMkdir {
    fn tap_mkdir(self) -> Self;
}

impl TapMkdir for PathBuf {
    fn tap_mkdir(self) -> Self {
        std::fs::create_dir_all(&self).unwrap();
        self
    }
}

// ---------------------------------------------------------------- cp -a

#[test]
fn cp_a_preserves_modes_times_and_symlinks() {
    let opt = Snap {
        file_times: true,
        dir_times: true,
    };
    // Inside the mount, from the mount to itself.
    let copied = same(&[], |dir| {
        make_tree(&dir.join("src").tap_mkdir());
        sh_ok(dir, "cp -a src dst");
        let (a, b) = (
            snapshot(&dir.join("src"), opt),
            snapshot(&dir.join("dst"), opt),
        );
        assert_eq!(differing(&a, &b), Vec::<String>::new(), "{}", dir.display());
        b.len()
    });
    assert!(copied > 350);

    // Into the mount from outside, and out of the mount again.
    let outside = tempfile::tempdir().unwrap();
    make_tree(&outside.path().join("src").tap_mkdir());
    let want = snapshot(&outside.path().join("src"), opt);
    let m = Mounted::new();
    sh_ok(
        m.path(),
        &format!("cp -a {}/src in", outside.path().display()),
    );
    let got = snapshot(&m.p("in"), opt);
    assert_eq!(
        differing(&want, &got),
        Vec::<String>::new(),
        "cp -a into the mount"
    );
    sh_ok(
        m.path(),
        &format!("cp -a in {}/back", outside.path().display()),
    );
    let back = snapshot(&outside.path().join("back"), opt);
    assert_eq!(
        differing(&want, &back),
        Vec::<String>::new(),
        "cp -a out of the mount"
    );
}

// ---------------------------------------------------------------- shell scripts

const DEEP_SCRIPT: &str = r#"set -e
d=a; for i in $(seq 1 60); do d="$d/sub$i"; done
mkdir -p "$d"
i=0; p=a
while [ $i -lt 60 ]; do i=$((i+1)); echo "level $i" > "$p/file$i"; p="$p/sub$i"; done
cp -r a b
mv b/sub1 b/moved
echo files $(find a b -type f | wc -l) dirs $(find a b -type d | wc -l)
cat "$d/../file60"
rm -rf a
[ ! -e a ] && echo gone
rm -r b
ls -A | wc -l
"#;

#[test]
fn shell_script_builds_and_removes_a_deep_tree() {
    let out = same(&[], |dir| sh_ok(dir, DEEP_SCRIPT));
    assert_eq!(out, "files 120 dirs 122\nlevel 60\ngone\n0\n");
}

// ---------------------------------------------------------------- concurrency

const WRITERS: &str = r#"
( for i in $(seq 1 1500); do echo "A $i" >> shared; echo "A $i" >> a.log; done ) &
( exec 3>>shared; for i in $(seq 1 1500); do echo "B $i" >&3; echo "B $i" >> b.log; done ) &
( exec 4>>shared; for i in $(seq 1 1500); do echo "C $i" >&4; done ) &
wait
"#;

/// Summary of what the writers left: line counts, and whether each writer's lines are all
/// there, intact, in order.
fn writers(dir: &Path) -> Vec<String> {
    sh_ok(dir, WRITERS);
    let mut log = Vec::new();
    let shared = std::fs::read_to_string(dir.join("shared")).unwrap();
    log.push(format!("shared lines {}", shared.lines().count()));
    for w in ["A", "B", "C"] {
        let seq: Vec<usize> = shared
            .lines()
            .filter(|l| l.starts_with(w))
            .map(|l| l[2..].parse().unwrap())
            .collect();
        log.push(format!(
            "{w} complete and ordered {}",
            seq == (1..=1500).collect::<Vec<_>>()
        ));
    }
    log.push(format!(
        "malformed {}",
        shared
            .lines()
            .filter(|l| l.len() < 3 || !"ABC".contains(&l[..1]) || l[2..].parse::<u32>().is_err())
            .count()
    ));
    for f in ["a.log", "b.log"] {
        log.push(format!(
            "{f} {}",
            std::fs::read_to_string(dir.join(f))
                .unwrap()
                .lines()
                .count()
        ));
    }
    log
}

fn check_writers(log: &[String]) {
    assert_eq!(
        log,
        [
            "shared lines 4500",
            "A complete and ordered true",
            "B complete and ordered true",
            "C complete and ordered true",
            "malformed 0",
            "a.log 1500",
            "b.log 1500"
        ]
    );
}

#[test]
fn concurrent_appenders_lose_no_lines() {
    check_writers(&same(&[], writers));
}

#[test]
fn concurrent_appenders_lose_no_lines_without_passthrough() {
    check_writers(&same(NO_PASSTHROUGH, writers));
}

/// A reader polling a file another process keeps rewriting (write to a temporary name,
/// rename over) always sees a whole version, never a mix or a missing file.
#[test]
fn atomic_replace_by_rename_under_a_reader() {
    let m = Mounted::new();
    let out = sh_out(
        m.path(),
        r#"
        i=0; while [ $i -lt 300 ]; do printf 'version %05d\n' $i > cfg.tmp; mv cfg.tmp cfg; i=$((i+1)); done &
        bad=0; j=0
        while [ $j -lt 300 ]; do
          if [ -e cfg ]; then c=$(cat cfg); case "$c" in "version "?????) ;; *) bad=$((bad+1));; esac; fi
          j=$((j+1))
        done
        wait
        echo bad $bad; cat cfg
        "#,
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "bad 0\nversion 00299\n"
    );
}

/// Several processes creating, renaming, linking and removing names in one directory
/// while another lists it: every operation succeeds and the end state is exact.
fn churn(dir: &Path) -> String {
    sh_ok(
        dir,
        r#"set -e
        for w in 1 2 3; do
          ( i=0; while [ $i -lt 80 ]; do
              echo "$w $i" > f$w.$i; mv f$w.$i g$w.$i; ln g$w.$i h$w.$i; rm g$w.$i
              mkdir d$w.$i; rmdir d$w.$i; i=$((i+1))
            done ) &
        done
        ( j=0; while [ $j -lt 30 ]; do ls -la > /dev/null; j=$((j+1)); done ) &
        wait
        "#,
    );
    sh_ok(
        dir,
        "ls | wc -l; cat h* | wc -l; stat -c %h h1.0 h3.79; ls -A | grep -v '^h' | wc -l",
    )
}

#[test]
fn concurrent_name_churn_in_one_directory() {
    assert_eq!(same(&[], churn), "240\n240\n1\n1\n0\n");
}

// ---------------------------------------------------------------- everyday editing tools

const EDITS: &str = r#"set -e
printf 'alpha\nbeta\ngamma\n' > a.txt
chmod 640 a.txt
sed -i 's/beta/BETA/' a.txt
perl -pi -e 's/gamma/GAMMA/' a.txt
cp a.txt b.txt
printf 'alpha\nBETA\nGAMMA\ndelta\n' > b.txt
diff -u a.txt b.txt > change.patch || true
patch -s a.txt < change.patch
install -m 750 -d bin
install -m 755 a.txt bin/tool
ln -sf ../a.txt bin/link
ln -sfn bin binlink
mkdir -p src && printf 'all: out\nout: in\n\tcp in out\n' > src/Makefile && echo data > src/in
make -s -C src
touch -d '2000-01-01' src/in && make -s -C src
zip -qr z.zip a.txt src && mkdir unz && cd unz && unzip -q ../z.zip && cd ..
echo '{"k": 1}' > j.json && node -e 'const fs=require("fs");const j=JSON.parse(fs.readFileSync("j.json"));j.k++;fs.writeFileSync("j.json.tmp",JSON.stringify(j));fs.renameSync("j.json.tmp","j.json")'
mv -T unz unzipped
rm change.patch z.zip
"#;

#[test]
fn everyday_editing_tools_like_on_disk() {
    let snap = same(&[], |dir| {
        sh_ok(dir, EDITS);
        snapshot(dir, Snap::default())
    });
    assert_eq!(
        std::str::from_utf8(match &snap[Path::new("a.txt")].kind {
            util::Kind::File(b) => b,
            k => panic!("{k:?}"),
        })
        .unwrap(),
        "alpha\nBETA\nGAMMA\ndelta\n"
    );
    assert_eq!(snap[Path::new("a.txt")].mode, 0o640);
    assert_eq!(snap[Path::new("bin")].mode, 0o750);
    assert!(snap.contains_key(Path::new("unzipped/src/in")));
    assert!(snap.contains_key(Path::new("src/out")));
}
