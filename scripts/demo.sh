#!/usr/bin/env bash
# agx's main job on the bundled sample project (sample/): copy it to a scratch directory,
# make it a git repository, mount agx over it in place, let a scripted "agent" work in it
# as one session (`agx run`) with real tools (python, sed, mv, rm, git) while the user
# edits a file of their own, show what agx recorded (log, diff, sessions, blame), undo the
# agent's session with `agx oops`, check the project is exactly as before (the user's file
# untouched), redo with `agx oops` again, unmount, and check the result on disk. Exits
# non-zero if any check fails.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

scripts/setup.sh
echo "== building agx"
cargo build --release --locked --quiet
agx="$repo/target/release/agx"

work=$(mktemp -d "${TMPDIR:-/tmp}/agx-demo.XXXXXX")
proj="$work/calc"
cleanup() {
    cd /
    if grep -q " $proj .* fuse\.agx " /proc/self/mountinfo 2>/dev/null; then
        "$agx" unmount "$proj" >/dev/null 2>&1 || umount -l "$proj" 2>/dev/null || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT

step() { printf '\n== %s\n' "$*"; }
check() { if eval "$1"; then echo "   ok: $2"; else echo "   FAILED: $2" >&2; exit 1; fi; }

step "copying the sample project to $proj and committing it"
cp -a sample "$proj"
git -C "$proj" init -q
git -C "$proj" -c user.name=demo -c user.email=demo@example.com add -A
git -C "$proj" -c user.name=demo -c user.email=demo@example.com commit -qm "initial sample"

step "agx mount $proj"
"$agx" mount "$proj"
"$agx" -C "$proj" status

step "the agent works inside the mount, as one session (agx run)"
cd "$proj"
cat > "$work/agent.sh" <<'AGENT'
set -euo pipefail
# An edit in place with sed, and a new module written by a shell redirect.
sed -i 's/return a \* b/return a * b  # checked/' calc/ops.py
cat > calc/power.py <<'PY'
def power(a, b):
    return a ** b
PY
# An edit the way agents make them: write a temporary file, then rename it over.
python3 - <<'PY'
import os
src = open("calc/__init__.py").read().replace(
    'from .ops import add, sub, mul, div',
    'from .ops import add, sub, mul, div\nfrom .power import power')
src = src.replace('"div"]', '"div", "power"]')
with open("calc/__init__.py.tmp", "w") as f:
    f.write(src)
os.rename("calc/__init__.py.tmp", "calc/__init__.py")
PY
# A rename and a delete.
mv NOTES.md DESIGN-NOTES.md
rm tests/test_ops.py
mkdir -p tests && cat > tests/test_power.py <<'PY'
import os, sys, unittest
sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from calc import power
class PowerTest(unittest.TestCase):
    def test_power(self):
        self.assertEqual(power(2, 10), 1024)
PY
python3 -m unittest discover -q -s tests 2>&1 | tail -1
git status --short
git -c user.name=agent -c user.email=agent@example.com add -A
git -c user.name=agent -c user.email=agent@example.com commit -qm "agent: add power()"
git log --oneline | head -3
AGENT
"$agx" run --agent demo-agent --name "add power()" -- bash "$work/agent.sh"

step "agx's view inside the mount"
check '[ -d "$proj/.agx" ] && [ "$(ls -A "$proj/.agx")" = at ]' ".agx/ in the mount is agx's virtual, read-only directory (only the views under at/)"
check '! touch "$proj/.agx/x" 2>/dev/null' "writes into .agx/ are refused"
check '[ -z "$(git status --porcelain 2>&1)" ]' "git status is clean and quiet: .agx/ is excluded"

step "meanwhile the user writes a note of their own (outside the session)"
echo "check the power() edge cases" > USER-TODO.txt

step "agx log: every change, who made it (newest first)"
"$agx" log | sed 's/^/   /'

step "agx diff --stat (since the mount)"
"$agx" diff --stat | sed 's/^/   /'
step "agx diff -- calc/__init__.py"
"$agx" diff -- calc/__init__.py | sed 's/^/   /'

step "agx session list / show: who did what"
"$agx" session list | sed 's/^/   /'
"$agx" session show 1 | sed 's/^/   /' | head -20
step "agx blame calc/__init__.py"
"$agx" blame calc/__init__.py | sed 's/^/   /'

step "agx oops: undo the agent's session in one command"
"$agx" oops --yes 2>&1 | sed 's/^/   /'
check 'diff -r --exclude=.git --exclude=.agx --exclude=USER-TODO.txt "$repo/sample" "$proj" >/dev/null' "the working tree is exactly the sample again"
check '[ "$(git log --oneline | wc -l)" -eq 1 ] && [ -z "$(git status --porcelain --untracked-files=no 2>&1)" ]' "git is back at the initial commit, clean"
check 'grep -q "edge cases" USER-TODO.txt' "the user's own note, written outside the session, is untouched"

step "agx oops again: the oops itself can be undone (redo)"
"$agx" oops --yes 2>&1 | tail -3 | sed 's/^/   /'
check '[ -f calc/power.py ] && grep -q "checked" calc/ops.py && [ "$(git log --oneline | wc -l)" -eq 2 ]' "the agent's work is back, commit included"
check 'grep -q "edge cases" USER-TODO.txt' "the user's note is still there"

step "agx unmount $proj"
cd /
"$agx" unmount "$proj"
check '! grep -q " $proj .* fuse\.agx " /proc/self/mountinfo' "the mount is gone"
check 'grep -q "^/.agx/$" "$proj/.git/info/exclude"' ".git/info/exclude lists /.agx/"
check '[ -f "$proj/calc/power.py" ] && grep -q "checked" "$proj/calc/ops.py"' "the agent's edits are on disk"
check '[ -f "$proj/DESIGN-NOTES.md" ] && [ ! -e "$proj/NOTES.md" ] && [ ! -e "$proj/tests/test_ops.py" ]' "the rename and the delete are on disk"
check '[ "$(git -C "$proj" log --oneline | wc -l)" -eq 2 ]' "the agent's commit is in git"
check '[ -d "$proj/.agx" ]' "agx's state directory exists in the bare project"
printf '\ndemo OK\n'
