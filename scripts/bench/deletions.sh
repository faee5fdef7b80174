# Sourced by scripts/bench.sh and scripts/bench-history.sh.
#
# On ext4 without a journal (as on some VMs), inodes deleted less than 60 s ago (300 s
# while their inode table block is dirty) are skipped, slowly, by every create in their
# block group. A script that deletes many files in its work directory records when in
# WORK/.last-delete; one that times creates waits until that is 65 s old.

# Prints 1 if directory $1 is on ext4 without a journal, else 0.
ext4_nojournal() {
    local src
    if [[ $(stat -f -c %T "$1") == ext2/ext3 ]]; then   # stat's name for ext4 too
        src=$(findmnt -no SOURCE --target "$1" 2>/dev/null || true)
        if [[ -n $src ]] && ! compgen -G "/proc/fs/jbd2/$(basename "$src")-*" >/dev/null; then
            echo 1
            return
        fi
    fi
    echo 0
}

# Prints how many seconds to wait until the deletions recorded in work directory $1 are
# 65 s old (0: none to wait for).
deletions_wait() {
    local age
    [[ -f $1/.last-delete ]] || { echo 0; return; }
    age=$(($(date +%s) - $(cat "$1/.last-delete")))
    if ((age < 65)); then echo $((65 - age)); else echo 0; fi
}

# Records that files were just deleted in work directory $1.
deletions_done() {
    date +%s >"$1/.last-delete"
}
