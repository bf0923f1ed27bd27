#!/usr/bin/env bash
# Test hosts on one machine, for multi-host runs: each host is a network and
# UTS namespace (its own hostname, as Open MPI needs: it merges hosts of the
# same name) on a bridge, running its own sshd with a throwaway key, and a
# mount namespace with a /tmp of its own. The rest of the filesystem is
# shared, as on a cluster with a shared home.
#
#   testhosts.sh up N [--slots S]  N hosts (dsl-h1 ... dsl-hN), S slots each
#                                  (2 by default); the last line printed is
#                                  the path of a DeepSpeed hostfile naming them
#   testhosts.sh down              removes everything `up` made
#   testhosts.sh kill HOST         kills every process of HOST (a host lost)
#   testhosts.sh partition HOST    cuts HOST's link; `heal HOST` restores it
#   testhosts.sh slow HOST RATE [DELAY]
#                                  shapes HOST's link both ways: RATE such as
#                                  1gbit or 100mbit (tc tbf), DELAY such as
#                                  1ms (tc netem, which some kernels lack)
#   testhosts.sh pids HOST         the processes of HOST, one per line
#   testhosts.sh slurm             a Slurm cluster on the hosts that are up:
#                                  slurmctld on dsl-h1, slurmd on each (as
#                                  many CPUs as slots), munged; the last line
#                                  printed is the SLURM_CONF to use
#
# The controller's side of the bridge is 198.51.100.1 and host i is
# 198.51.100.(10+i); jobs on the test hosts set cluster.network_interface to
# 198.51.100.0/24. Names resolve through
# /etc/hosts and ssh finds its key through /etc/ssh/ssh_config.d, both in
# blocks this script marks and removes. Every command is idempotent and safe
# after a run that died half-way. Needs root.
set -euo pipefail
# The tools below live in sbin folders, which a test's PATH may lack.
export PATH="/usr/sbin:/sbin:/usr/bin:/bin:$PATH"

state=/run/dslaunch-testhosts
bridge=dslbr0
# A documentation range (TEST-NET-2): routes nowhere. DSL_TESTHOSTS_SUBNET
# picks another /24 (its first three numbers) where a machine uses this one.
subnet_prefix=${DSL_TESTHOSTS_SUBNET:-198.51.100}
marker="# dslaunch testhosts"
ssh_drop_in=/etc/ssh/ssh_config.d/dslaunch-testhosts.conf

die() {
  echo "testhosts: $*" >&2
  exit 1
}

host_index() { # dsl-hN -> N
  [[ "$1" =~ ^dsl-h([0-9]+)$ ]] || die "'$1' is not a test host name (dsl-h1, dsl-h2, ...)"
  [ -e "/run/netns/dslh${BASH_REMATCH[1]}" ] || die "test host '$1' is not up"
  echo "${BASH_REMATCH[1]}"
}

up_hosts() { # the indices of the hosts that exist now
  local netns
  for netns in /run/netns/dslh*; do
    [ -e "$netns" ] && echo "${netns#/run/netns/dslh}"
  done | sort -n
}

run_in() { # run_in N command...: inside host N's namespaces
  nsenter --net="/run/netns/dslh$1" --uts="$state/h$1/uts" --mount="$state/h$1/mnt" "${@:2}"
}

kill_host_processes() {
  local pids
  pids=$(ip netns pids "dslh$1" 2>/dev/null || true)
  [ -z "$pids" ] && return 0
  kill -9 $pids 2>/dev/null || true
  for _ in $(seq 50); do
    [ -z "$(ip netns pids "dslh$1" 2>/dev/null || true)" ] && return 0
    sleep 0.1
  done
}

remove_host() {
  kill_host_processes "$1"
  ip link del "dslv$1" 2>/dev/null || true
  ip netns del "dslh$1" 2>/dev/null || true
  umount "$state/h$1/uts" 2>/dev/null || true
  umount "$state/h$1/mnt" 2>/dev/null || true
  rm -rf "${state:?}/h$1"
}

write_name_resolution() { # /etc/hosts and the ssh drop-in for hosts 1..N
  local n=$1 i tmp
  tmp=$(mktemp)
  grep -v "$marker" /etc/hosts >"$tmp" || true
  for i in $(seq "$n"); do
    echo "$subnet_prefix.$((10 + i)) dsl-h$i $marker" >>"$tmp"
  done
  # /etc/hosts may be a bind mount (containers): rewrite it in place.
  cat "$tmp" >/etc/hosts
  rm -f "$tmp"
  mkdir -p "$(dirname "$ssh_drop_in")"
  cat >"$ssh_drop_in" <<EOF
$marker: the test hosts' throwaway key
Host dsl-h*
  IdentityFile $state/id_ed25519
  StrictHostKeyChecking no
  UserKnownHostsFile /dev/null
  LogLevel ERROR
  BatchMode yes
  ConnectTimeout 10
EOF
}

start_sshd() {
  local i=$1 dir="$state/h$1"
  if [ -s "$dir/sshd.pid" ] && kill -0 "$(cat "$dir/sshd.pid")" 2>/dev/null; then return 0; fi
  [ -f "$dir/ssh_host_ed25519_key" ] || ssh-keygen -q -t ed25519 -N '' -f "$dir/ssh_host_ed25519_key"
  cat >"$dir/sshd_config" <<EOF
ListenAddress $subnet_prefix.$((10 + i))
Port 22
HostKey $dir/ssh_host_ed25519_key
PidFile $dir/sshd.pid
AuthorizedKeysFile $state/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
MaxStartups 100
MaxSessions 100
EOF
  mkdir -p /run/sshd
  run_in "$i" /usr/sbin/sshd -f "$dir/sshd_config" -E "$dir/sshd.log"
}

make_host() {
  local i=$1 dir="$state/h$1"
  mkdir -p "$dir"
  if [ ! -e "/run/netns/dslh$i" ]; then
    ip netns add "dslh$i"
  fi
  # A UTS namespace kept alive by a bind mount, named dsl-hN, and a mount
  # namespace whose /tmp is its own (Open MPI's and Slurm's session files
  # there must not meet another host's).
  if ! mountpoint -q "$dir/uts" 2>/dev/null; then
    touch "$dir/uts"
    unshare --uts="$dir/uts" hostname "dsl-h$i"
  fi
  if ! mountpoint -q "$dir/mnt" 2>/dev/null; then
    touch "$dir/mnt"
    unshare --mount="$dir/mnt" --propagation private mount -t tmpfs -o size=1g,mode=1777 \
      "tmp-dsl-h$i" /tmp
  fi
  if ! ip link show "dslv$i" >/dev/null 2>&1; then
    ip link add "dslv$i" type veth peer name eth0 netns "dslh$i"
  fi
  ip link set "dslv$i" master "$bridge"
  ip link set "dslv$i" up
  ip netns exec "dslh$i" ip link set lo up
  ip netns exec "dslh$i" ip addr replace "$subnet_prefix.$((10 + i))/24" dev eth0
  ip netns exec "dslh$i" ip link set eth0 up
  start_sshd "$i"
}

wait_for_ssh() { # every host accepts the key (sshd may take a moment)
  local i
  for i in $(seq "$1"); do
    for attempt in $(seq 20); do
      if ssh -o ConnectTimeout=1 "dsl-h$i" true 2>/dev/null; then break; fi
      [ "$attempt" = 20 ] && die "dsl-h$i: ssh does not answer (log: $state/h$i/sshd.log)"
      sleep 0.1
    done
  done
}

cmd_up() {
  local n="" slots=2
  while [ $# -gt 0 ]; do
    case "$1" in
      --slots) slots=${2:?--slots needs a number}; shift 2 ;;
      --slots=*) slots=${1#--slots=}; shift ;;
      *) n=$1; shift ;;
    esac
  done
  [[ "$n" =~ ^[1-9][0-9]*$ ]] && [ "$n" -le 200 ] || die "usage: up N [--slots S] (N from 1 to 200)"
  [[ "$slots" =~ ^[1-9][0-9]*$ ]] || die "--slots must be a positive number, not '$slots'"
  [ "$(id -u)" = 0 ] || die "needs root (network namespaces)"
  local taken
  taken=$(ip -o -4 addr show | grep -v " $bridge " | grep " $subnet_prefix\." || true)
  [ -z "$taken" ] || die "this machine already uses $subnet_prefix.0/24 ($(echo "$taken" | awk '{print $2, $4}' | head -1)); set DSL_TESTHOSTS_SUBNET to another /24, such as 203.0.113"
  mkdir -p "$state"
  # Namespaces are kept by bind mounts of their files, which must lie on a
  # private mount.
  if ! mountpoint -q "$state"; then
    mount --bind "$state" "$state"
    mount --make-private "$state"
  fi
  local i
  for i in $(up_hosts); do
    [ "$i" -gt "$n" ] && remove_host "$i"
  done
  [ -f "$state/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -f "$state/id_ed25519"
  cp "$state/id_ed25519.pub" "$state/authorized_keys"
  if ! ip link show "$bridge" >/dev/null 2>&1; then ip link add "$bridge" type bridge; fi
  ip addr replace "$subnet_prefix.1/24" dev "$bridge"
  ip link set "$bridge" up
  write_name_resolution "$n"
  for i in $(seq "$n"); do make_host "$i"; done
  wait_for_ssh "$n"
  : >"$state/hostfile"
  for i in $(seq "$n"); do echo "dsl-h$i slots=$slots" >>"$state/hostfile"; done
  echo "$state/hostfile"
}

cmd_down() {
  local i
  for i in $(up_hosts); do remove_host "$i"; done
  # Hosts whose namespace went but whose pieces stayed (a run that died).
  local link
  for link in $(ip -o link show 2>/dev/null | grep -o 'dslv[0-9]*' | sort -u || true); do
    ip link del "$link" 2>/dev/null || true
  done
  ip link del "$bridge" 2>/dev/null || true
  stop_munged
  if [ -d "$state" ]; then
    for file in "$state"/h*/uts "$state"/h*/mnt; do umount "$file" 2>/dev/null || true; done
    umount -l "$state" 2>/dev/null || true
    rm -rf "$state"
  fi
  if grep -q "$marker" /etc/hosts 2>/dev/null; then
    local tmp
    tmp=$(mktemp)
    grep -v "$marker" /etc/hosts >"$tmp" || true
    cat "$tmp" >/etc/hosts
    rm -f "$tmp"
  fi
  rm -f "$ssh_drop_in"
}

# munged, when this script started it: one serves every host (its socket
# is on the shared filesystem).
stop_munged() {
  [ -s "$state/munged.pid" ] || return 0
  kill "$(cat "$state/munged.pid")" 2>/dev/null || true
  rm -f "$state/munged.pid"
}

cmd_slurm() {
  local hosts
  hosts=$(up_hosts)
  [ -n "$hosts" ] || die "no test hosts: run 'up N' first"
  local slurm="$state/slurm" i
  mkdir -p "$slurm/ctld"
  for i in $hosts; do mkdir -p "$slurm/spool/dsl-h$i"; done
  {
    echo "ClusterName=dsltest"
    echo "SlurmctldHost=dsl-h1($subnet_prefix.11)"
    echo "AuthType=auth/munge"
    echo "CredType=cred/munge"
    # A requeued job may start again this many seconds later (120 by default).
    echo "AuthInfo=cred_expire=5"
    echo "MpiDefault=none"
    echo "ProctrackType=proctrack/linuxproc"
    echo "TaskPlugin=task/none"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    # The hosts share this machine's cores: each node has its slots as CPUs.
    echo "SlurmdParameters=config_overrides"
    echo "StateSaveLocation=$slurm/ctld"
    echo "SlurmdSpoolDir=$slurm/spool/%n"
    echo "SlurmctldPidFile=$slurm/slurmctld.pid"
    echo "SlurmdPidFile=$slurm/slurmd-%n.pid"
    echo "SlurmctldLogFile=$slurm/slurmctld.log"
    echo "SlurmdLogFile=$slurm/slurmd-%n.log"
    echo "SelectType=select/cons_tres"
    echo "SelectTypeParameters=CR_Core"
    echo "ReturnToService=2"
    echo "JobRequeue=1"
    echo "KillWait=10"
    echo "JobAcctGatherType=jobacct_gather/none"
    echo "AccountingStorageType=accounting_storage/none"
    while read -r host slots; do
      i=${host#dsl-h}
      echo "NodeName=$host NodeAddr=$subnet_prefix.$((10 + i)) CPUs=${slots#slots=} State=UNKNOWN"
    done <"$state/hostfile"
    echo "PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
  } >"$slurm/slurm.conf"
  if ! pgrep -x munged >/dev/null; then
    mkdir -p /run/munge
    chown munge:munge /run/munge
    runuser -u munge -- /usr/sbin/munged
    pgrep -x -n munged >"$state/munged.pid"
  fi
  for i in $hosts; do
    kill $(ip netns pids "dslh$i" | while read -r pid; do
      case "$(cat "/proc/$pid/comm" 2>/dev/null)" in slurmd | slurmctld) echo "$pid" ;; esac
    done) 2>/dev/null || true
  done
  run_in 1 env SLURM_CONF="$slurm/slurm.conf" /usr/sbin/slurmctld -i
  for i in $hosts; do run_in "$i" env SLURM_CONF="$slurm/slurm.conf" /usr/sbin/slurmd; done
  local expected idle
  expected=$(echo "$hosts" | wc -w)
  for _ in $(seq 100); do
    idle=$(SLURM_CONF="$slurm/slurm.conf" sinfo -h -t idle -o '%D' 2>/dev/null || true)
    [ "${idle:-0}" = "$expected" ] && break
    sleep 0.2
  done
  [ "${idle:-0}" = "$expected" ] || die "slurm: $expected nodes should be idle (logs in $slurm)"
  echo "$slurm/slurm.conf"
}

shape() { # shape N qdisc-arguments...: both directions of host N's link
  tc qdisc replace dev "dslv$1" root "${@:2}"
  ip netns exec "dslh$1" tc qdisc replace dev eth0 root "${@:2}"
}

main() {
  local command=${1:-}
  shift || true
  case "$command" in
    up) cmd_up "$@" ;;
    down) cmd_down ;;
    kill) kill_host_processes "$(host_index "${1:?kill HOST}")" ;;
    partition) ip link set "dslv$(host_index "${1:?partition HOST}")" down ;;
    heal) ip link set "dslv$(host_index "${1:?heal HOST}")" up ;;
    slow)
      local i
      i=$(host_index "${1:?slow HOST RATE [DELAY]}")
      [ -n "${2:-}" ] || die "usage: slow HOST RATE [DELAY]"
      if [ -n "${3:-}" ]; then
        shape "$i" netem rate "$2" delay "$3" ||
          die "slow: tc netem (for DELAY) is not available in this kernel; give RATE alone"
      else
        # A token bucket: every kernel has it. A 1 MB burst keeps even 1 Gbit/s
        # at its rate with a 250 Hz timer.
        shape "$i" tbf rate "$2" burst 1mb latency 100ms
      fi
      ;;
    pids) ip netns pids "dslh$(host_index "${1:?pids HOST}")" ;;
    slurm) cmd_slurm ;;
    *) die "usage: testhosts.sh up N [--slots S] | down | kill HOST | partition HOST | heal HOST | slow HOST RATE [DELAY] | pids HOST | slurm" ;;
  esac
}

main "$@"
