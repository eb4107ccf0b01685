#!/bin/sh
# Makes testdata/roots/v1: a state root as crew's record and config schema
# version 1 (every release up to 3d4454e) left it, with a run in every
# state, a queue ticket, a capped log, a finish index and a refusal. Run it
# with that release's crew, built with -tags failpoints (the provisioning
# and running records are left by crew processes killed at a failpoint):
#
#   git archive 3d4454e | tar -x -C /tmp/prev && (cd /tmp/prev &&
#     CGO_ENABLED=0 go build -tags failpoints -o /tmp/crew-prev ./cmd/crew)
#   sh testdata/roots/make-v1.sh /tmp/crew-prev
#
# The e2e upgrade tests (e2e/upgrade_test.go) copy the result into a fresh
# state root and drive today's crew on it. Git keeps no FIFOs, empty
# directories or modes: the copy makes what crew expects of those.
set -eu
crew=$1
out=$(cd "$(dirname "$0")" && pwd)/v1
root=$(mktemp -d)/state
c() { "$crew" --root "$root" "$@"; }

c init --max 3 --pool deploy=1 --log-max 64KiB >/dev/null
c start ok -- sh -c 'echo hello from ok' >/dev/null
c start fails -- sh -c 'echo about to fail >&2; exit 3' >/dev/null || true
c start slow --timeout 100ms -- sleep 5 >/dev/null 2>&1 || true
c start chatty -- sh -c 'i=0; while [ $i -lt 3000 ]; do echo "line $i of chatty output"; i=$((i+1)); done' >/dev/null
c start --pool deploy deploy:prod -- true >/dev/null
c start retried --retries 1 --retry-delay 10ms -- sh -c 'exit 7' >/dev/null 2>&1 || true
c start "ünïcode task/with spaces" -- true >/dev/null
# stopped: a run stopped by crew stop
c start --detach stopme -- sleep 30 >/dev/null
c stop stopme >/dev/null
# refused: the task is already running (a detached run holds it)
c start --detach holder -- sleep 30 >/dev/null
c start holder -- true >/dev/null 2>&1 || true
c stop holder >/dev/null
# interrupted: its supervisor dies at the final write; crew recover finalizes it
CREW_FAILPOINT=exited:kill c start lost -- true >/dev/null 2>&1 || true
c recover >/dev/null 2>&1 || true
# Left active: the copy is taken while these still run (as a backup of a
# live root is, or as an upgrade finds one): two running runs, one
# provisioning (held at a failpoint before its command starts), and a
# waiting start's ticket. Nobody holds their locks when the copy is read.
c start --detach running -- sleep 30 >/dev/null
c start --detach running-too -- sleep 30 >/dev/null
gate=$(dirname "$root")/gate
CREW_FAILPOINT=admitted:wait:$gate "$crew" --root "$root" start provisioning -- true >/dev/null 2>&1 &
starter=$!
while [ ! -e "$gate.reached" ]; do sleep 0.01; done
"$crew" --root "$root" start --wait queued -- true >/dev/null 2>&1 &
waiter=$!
while [ -z "$(ls "$root/queue" | grep '\.json$' || true)" ]; do sleep 0.01; done

rm -rf "$out"
mkdir -p "$out"
cp -R "$root"/. "$out"/
# The queue's bell is a FIFO, which git cannot keep; the copy remakes none.
find "$out" -type p -delete

kill -KILL $waiter
touch "$gate"
wait $starter $waiter 2>/dev/null || true
c stop running >/dev/null 2>&1 || true
c stop running-too >/dev/null 2>&1 || true
rm -rf "$(dirname "$root")"
