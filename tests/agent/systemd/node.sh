#!/bin/bash
# Runs inside a Debian rootfs booted by systemd-nspawn (systemd 252 as PID 1),
# as a oneshot unit; tests/agent/systemd.rs drives it and reads /results/log.
# control-plane: the shipped unit is bind-mounted read-only at
# /etc/systemd/system/durasync-agent.service, the test-built binary at
# /usr/local/bin/durasync, the certsync component at
# /usr/lib/durasync/certsync.wasm; bare: the same files in a checkout at /src.
# The node's /etc/kubernetes comes from the host.
#
#   node.sh control-plane   /etc/kubernetes/{static-pod-resources,manifests} exist
#   node.sh bare            /etc/kubernetes is empty (a worker, or before set-up);
#                           the unit is installed by docs/agent.md's commands
#                           ($T/install.sh) from a checkout at /src
#
# Every check prints `ok: ID` (the driver requires each ID) or `FAIL: …`
# and exits non-zero. Waits poll and are bounded (a failure bound, never a
# timing): the machine running this is a loaded 2-core one.
set -uo pipefail

T=/durasync-test
UNIT=durasync-agent
SHA=$(cat $T/certsync.sha256)
RUN=/run/durasync-test
SPR=/etc/kubernetes/static-pod-resources

fail() {
    echo "FAIL: $*"
    journalctl --no-pager -o short-monotonic -u "$UNIT" -u "$UNIT-nodash" >/results/journal.txt 2>&1
    systemctl status --no-pager "$UNIT" >>/results/journal.txt 2>&1
    exit 1
}
ok() { echo "ok: $*"; }
prop() { systemctl show -p "$1" --value "${2:-$UNIT}"; }
journal() { journalctl --no-pager -o cat -u "$UNIT"; }

# wait_until DESCRIPTION COMMAND…: poll every 50 ms, fail after 3 minutes.
wait_until() {
    local desc=$1 i
    shift
    for ((i = 0; i < 3600; i++)); do
        "$@" && return 0
        sleep 0.05
    done
    fail "timed out waiting until $desc"
}
is() { [ "$(prop "$1")" = "$2" ]; }
# The certsync tree under $1 is generation $2 (the driver checks it
# byte for byte from the host afterwards).
generation_is() {
    grep -qx "generation $2 tls.crt" "$1/secrets/tls/tls.crt" 2>/dev/null &&
        grep -qx "generation $2 tls.key" "$1/secrets/tls/tls.key" &&
        grep -qx "generation $2 ca.crt" "$1/configmaps/ca/ca.crt"
}
# Replace an input the way `kubectl … > tmp && mv tmp file` does.
set_input() { cp "$T/gen$2.json" "$RUN/$1.tmp" && mv "$RUN/$1.tmp" "$RUN/$1.json"; }
# The input command of instance `certs`, blocked while $RUN/hold exists.
held() { pgrep -f 'durasync-test/hold \]; do sleep' >/dev/null; }
# GET $1 from the agent's metrics server with bash's /dev/tcp (minbase has
# no curl): prints the status line's code, then the body.
http_get() {
    local response
    exec 3<>/dev/tcp/127.0.0.1/9464 || return 1
    printf 'GET %s HTTP/1.0\r\nHost: localhost\r\n\r\n' "$1" >&3
    response=$(cat <&3)
    exec 3<&-
    printf '%s\n' "$response" | head -1 | cut -d' ' -f2
    printf '%s\n' "${response#*$'\r\n\r\n'}"
}

# /readyz's body holds $1.
readyz_says() { http_get /readyz | grep -qF "$1"; }

# certs: a root inside ReadWritePaths; its input is a command (blocked
# while $RUN/hold exists, so a run can be held in flight).
manifest_certs_command() {
    cat >/etc/durasync/agent.d/certs.toml <<EOF
name = "certs"
wasm = "/usr/lib/durasync/certsync.wasm"
sha256 = "$SHA"
[roots.certs]
path = "$SPR/certs"
access = "rw"
[input]
command = ["/bin/sh", "-c", "while [ -e $RUN/hold ]; do sleep 0.05; done; exec cat $RUN/certs.json"]
command_timeout_ms = 600000
[config]
secrets = [{ name = "tls" }]
configmaps = [{ name = "ca" }]
EOF
}

# $1: instance name, $2: its root; input from the file $RUN/$1.json.
manifest_file_input() {
    cat >"/etc/durasync/agent.d/$1.toml" <<EOF
name = "$1"
wasm = "/usr/lib/durasync/certsync.wasm"
sha256 = "$SHA"
[roots.certs]
path = "$2"
access = "rw"
[input]
file = "$RUN/$1.json"
[config]
secrets = [{ name = "tls" }]
configmaps = [{ name = "ca" }]
EOF
}

# Every program the unit runs, except durasync itself, comes from an
# essential package: it is on every Debian node, minbase included.
check_programs_are_essential() {
    local line prog pkg
    while IFS= read -r line; do
        prog=${line#*=}
        prog=${prog%% *}
        prog=${prog#[-@:+!]}
        [ "$prog" = /usr/local/bin/durasync ] && continue
        pkg=$(dpkg-query -S "$prog" 2>/dev/null | grep -v '^diversion by' | head -1 | cut -d: -f1) ||
            fail "$line: $prog belongs to no package"
        [ -n "$pkg" ] || fail "$line: $prog belongs to no package"
        [ "$(dpkg-query -W -f='${Essential}' "$pkg")" = yes ] ||
            fail "$line: $prog comes from $pkg, which is not essential (minbase may lack it)"
    done < <(grep -E '^Exec[A-Za-z]*=' /etc/systemd/system/$UNIT.service)
    ok programs-essential
}

control_plane() {
    mkdir -p $RUN /etc/durasync/agent.d $SPR/certs $SPR/hooked /srv/outside
    [ -d /etc/kubernetes/manifests ] || fail "/etc/kubernetes/manifests is missing"
    check_programs_are_essential
    set_input certs 1
    set_input outside 1
    manifest_certs_command
    # outside: a root outside ReadWritePaths (read-only under ProtectSystem=strict).
    manifest_file_input outside /srv/outside
    # hooked: a validator and an action, whose ledger is in the unit's
    # StateDirectory (/var/lib/durasync, the default --state-dir). The
    # validator sees the staged copy of the directory synced ({staged} is
    # secrets/tls's, not the root's): it checks the key there.
    set_input hooked 1
    manifest_file_input hooked $SPR/hooked
    cat >>/etc/durasync/agent.d/hooked.toml <<EOF
[[validate]]
name = "key-present"
root = "certs"
path = "secrets/**"
command = ["/bin/sh", "-c", "test -s \\"\$1/tls.key\\"", "validator", "{staged}"]
[[action]]
name = "reload"
root = "certs"
command = ["/bin/sh", "-c", "[ ! -e $RUN/action-fails ] || exit 1; grep -h generation $SPR/hooked/secrets/tls/tls.crt >>$SPR/hooked-actions.log"]
EOF

    # 1. Type=notify: activating while the first round runs, active after it.
    touch $RUN/hold
    systemctl enable --quiet $UNIT || fail "systemctl enable"
    systemctl start --no-block $UNIT
    wait_until "the first run of certs is in flight" held
    is ActiveState activating || fail "ActiveState=$(prop ActiveState) while the first round runs"
    generation_is $SPR/certs 1 && fail "certs was written before its input came"
    ok activating-during-first-round
    rm $RUN/hold
    wait_until "the unit is active" is ActiveState active
    generation_is $SPR/certs 1 || fail "active, but certs is not generation 1"
    journal | grep -q 'first round done' || fail "no 'first round done' in the journal"
    ok active-after-first-round

    # 2. STATUS=: two instances ready, one failing.
    [ "$(prop StatusText)" = "3 instances, 2 ready, 1 not ready" ] || fail "StatusText=$(prop StatusText)"
    ok status-text

    # 2b. The validator accepted, the action ran once the change was
    # durable, its ledger on the node's disk; a change of the input runs
    # both again.
    wait_until "hooked is generation 1" generation_is $SPR/hooked 1
    wait_until "hooked's action ran" grep -qx "generation 1 tls.crt" $SPR/hooked-actions.log
    [ -d /var/lib/durasync/actions ] || fail "no ledger directory in the StateDirectory"
    set_input hooked 2
    wait_until "hooked is generation 2" generation_is $SPR/hooked 2
    wait_until "hooked's action ran for generation 2" grep -qx "generation 2 tls.crt" $SPR/hooked-actions.log
    journal | grep 'hooked' | grep -qi 'read-only' && fail "the ledger is read-only: $(journal | grep hooked)"
    # The ledger survives a restart of the unit: an action that fails stays
    # owed in /var/lib/durasync (the StateDirectory) and /readyz names it;
    # after the stop (step 5) and the start (step 6) it runs from the ledger.
    touch $RUN/action-fails
    set_input hooked 3
    wait_until "hooked is generation 3" generation_is $SPR/hooked 3
    wait_until "the failed action is owed" grep -qx reload /var/lib/durasync/actions/hooked.owed
    wait_until "/readyz names the failed action" readyz_says 'action reload failed: exited with status 1'
    ok action-and-validator

    # 3. The hardening is enforced: the root outside ReadWritePaths fails,
    # named, with EROFS; nothing was written there; the root inside works.
    journal | grep 'outside' | grep -q 'Read-only file system' ||
        fail "no EROFS for the instance outside ReadWritePaths in the journal"
    [ -z "$(ls -A /srv/outside)" ] || fail "/srv/outside was written: $(ls -A /srv/outside)"
    local readyz healthz
    readyz=$(http_get /readyz)
    [ "$(head -1 <<<"$readyz")" = 503 ] || fail "/readyz: $readyz"
    grep -q '"instance":"outside"' <<<"$readyz" && grep -q 'Read-only file system' <<<"$readyz" ||
        fail "/readyz does not name outside's EROFS: $readyz"
    healthz=$(http_get /healthz)
    [ "$(head -1 <<<"$healthz")" = 200 ] || fail "/healthz: $healthz"
    ok hardening-enforced

    # 4. systemctl reload: SIGHUP reruns every instance. The input command
    # is not watched, so only the reload can bring generation 2 in.
    set_input certs 2
    local reloads
    reloads=$(journal | grep -c 'SIGHUP: reloading every manifest')
    systemctl reload $UNIT || fail "systemctl reload"
    # reload returns before a notify service's reload completes: poll.
    wait_until "certs is generation 2 after the reload" generation_is $SPR/certs 2
    [ "$(journal | grep -c 'SIGHUP: reloading every manifest')" -gt "$reloads" ] ||
        fail "the reload reached the agent as no SIGHUP"
    [ "$(prop NRestarts)" = 0 ] || fail "NRestarts=$(prop NRestarts)"
    ok reload

    # 5. systemctl stop with a run in flight: the agent lets it finish
    # within --grace, exits 0, and the target is the new tree.
    touch $RUN/hold
    set_input certs 3
    systemctl reload $UNIT || fail "systemctl reload"
    wait_until "a run of certs is in flight" held
    systemctl stop --no-block $UNIT
    wait_until "the unit is deactivating" is ActiveState deactivating
    wait_until "the agent waits for the run in flight" \
        sh -c "journalctl --no-pager -o cat -u $UNIT | grep -q 'SIGTERM: no new runs; waiting up to 30s for'"
    generation_is $SPR/certs 2 || fail "certs changed before the held run went on"
    rm $RUN/hold
    wait_until "the unit is inactive" is ActiveState inactive
    [ "$(prop Result)" = success ] || fail "Result=$(prop Result)"
    [ "$(prop ExecMainStatus)" = 0 ] || fail "ExecMainStatus=$(prop ExecMainStatus)"
    generation_is $SPR/certs 3 || fail "after the stop certs is not generation 3"
    ok stop-during-run
    grep -qx reload /var/lib/durasync/actions/hooked.owed || fail "the owed action is not in the ledger after a stop"
    grep -qx "generation 3 tls.crt" $SPR/hooked-actions.log && fail "the failing action ran"
    rm $RUN/action-fails

    # 6. WatchdogSec: a stuck agent (SIGSTOP) is killed and restarted. The
    # shipped 60 s is shortened to 4 s by a drop-in, for this test only.
    mkdir -p /etc/systemd/system/$UNIT.service.d
    printf '[Service]\nWatchdogSec=4s\n' >/etc/systemd/system/$UNIT.service.d/watchdog.conf
    systemctl daemon-reload
    systemctl start $UNIT || fail "systemctl start with WatchdogSec=4s"
    wait_until "hooked's owed action ran after the restart" grep -qx "generation 3 tls.crt" $SPR/hooked-actions.log
    wait_until "the ledger is cleared" sh -c "[ ! -s /var/lib/durasync/actions/hooked.owed ]"
    ok action-owed-across-restart
    journal | grep -q 'systemd watchdog: pinging every 2s' || fail "the agent does not ping every 2 s"
    local pid restarts
    pid=$(prop MainPID)
    restarts=$(prop NRestarts)
    kill -STOP "$pid" || fail "kill -STOP $pid"
    wait_until "the stuck agent is restarted" \
        sh -c "[ \"\$(systemctl show -p NRestarts --value $UNIT)\" -gt $restarts ] &&
               [ \"\$(systemctl show -p MainPID --value $UNIT)\" != $pid ] &&
               [ \"\$(systemctl show -p ActiveState --value $UNIT)\" = active ]"
    journal | grep -q 'Watchdog timeout' || fail "no 'Watchdog timeout' in the journal"
    [ -e /proc/"$pid" ] && fail "the stuck agent $pid is still there"
    ok watchdog-restart
    systemctl stop $UNIT
}

bare() {
    mkdir -p $RUN
    [ -z "$(ls -A /etc/kubernetes)" ] || fail "/etc/kubernetes is not empty: $(ls -A /etc/kubernetes)"
    # docs/agent.md's commands, from a checkout at /src: the unit starts with
    # no /etc/kubernetes directory at all and no instance.
    bash $T/install.sh >/results/install.log 2>&1 || fail "docs/agent.md's install commands: $(cat /results/install.log)"
    cmp /src/contrib/systemd/$UNIT.service /etc/systemd/system/$UNIT.service || fail "the installed unit differs"
    is ActiveState active || fail "ActiveState=$(prop ActiveState)"
    [ "$(prop StatusText)" = "0 instances, 0 ready, 0 not ready" ] || fail "StatusText=$(prop StatusText)"
    [ "$(systemctl is-enabled $UNIT)" = enabled ] || fail "not enabled"
    systemctl stop $UNIT
    [ "$(prop Result)" = success ] || fail "Result=$(prop Result)"
    ok installed-as-documented-starts-without-kubernetes-dirs

    # Without the `-` prefixes, the unit cannot start here: the driver's
    # regression check that this node reproduces the failure.
    sed -E '/^ReadWritePaths=/ s#(=| )-/#\1/#g' \
        /etc/systemd/system/$UNIT.service >/etc/systemd/system/$UNIT-nodash.service
    cmp -s /etc/systemd/system/$UNIT.service /etc/systemd/system/$UNIT-nodash.service &&
        fail "the shipped unit's ReadWritePaths has no '-' prefix"
    systemctl daemon-reload
    systemctl start $UNIT-nodash && fail "the unit without '-' started on a bare node"
    [ "$(prop ExecMainStatus $UNIT-nodash)" = 226 ] ||
        fail "without '-': ExecMainStatus=$(prop ExecMainStatus $UNIT-nodash), not 226/NAMESPACE"
    systemctl stop $UNIT-nodash
    ok without-dash-fails-226

    # With static-pod-resources but no manifests (a worker, or before the
    # control plane is set up), it syncs into it.
    mkdir -p $SPR/certs
    set_input certs 1
    manifest_file_input certs $SPR/certs
    systemctl start $UNIT || fail "systemctl start without /etc/kubernetes/manifests"
    generation_is $SPR/certs 1 || fail "active, but certs is not generation 1"
    [ "$(prop StatusText)" = "1 instances, 1 ready, 0 not ready" ] || fail "StatusText=$(prop StatusText)"
    [ -e /etc/kubernetes/manifests ] && fail "/etc/kubernetes/manifests was created"
    systemctl stop $UNIT
    [ "$(prop Result)" = success ] || fail "Result=$(prop Result)"
    ok starts-without-manifests-dir
}

case "${1:-}" in
control-plane) control_plane ;;
bare) bare ;;
*) fail "usage: node.sh control-plane|bare" ;;
esac
journalctl --no-pager -o short-monotonic -u "$UNIT" >/results/journal.txt 2>&1
echo "done: $1"
