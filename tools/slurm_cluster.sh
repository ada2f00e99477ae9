#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for tests (tests/runtime/test_slurm.py, `make slurm-test`).
#
#   tools/slurm_cluster.sh start [SCRATCH]   # installs slurmctld slurmd slurm-client munge with
#                                            # apt-get when missing, writes SCRATCH/slurm.conf
#                                            # (this host, its CPUs), starts munged, slurmctld,
#                                            # slurmd in the background, waits for the node
#   tools/slurm_cluster.sh stop [SCRATCH]    # stops the daemons it started, by their pids
#   tools/slurm_cluster.sh env [SCRATCH]     # prints `export SLURM_CONF=...` for the client tools
#
# SCRATCH defaults to ${SENSBOOK_SLURM_SCRATCH:-/tmp/sensbook-slurm}. Needs root (the daemons run
# as root, munged as the munge user). Exit status 3: cannot run here (not root, no apt-get).
# A munged that was already running (e.g. a real cluster's) is reused and never stopped.
set -euo pipefail
cmd=${1:-}
SCRATCH=$(realpath -m "${2:-${SENSBOOK_SLURM_SCRATCH:-/tmp/sensbook-slurm}}")
export SLURM_CONF=$SCRATCH/slurm.conf

log() { echo "slurm_cluster: $*" >&2; }

stop_pid() {   # stop_pid FILE: SIGTERM the pid in FILE, wait, SIGKILL if it lingers
  local f=$1 pid
  [ -s "$f" ] || return 0
  pid=$(cat "$f")
  if kill -0 "$pid" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

install_packages() {
  local missing=()
  for b in /usr/sbin/slurmctld:slurmctld /usr/sbin/slurmd:slurmd /usr/bin/sbatch:slurm-client \
           /usr/sbin/munged:munge; do
    [ -x "${b%%:*}" ] || missing+=("${b##*:}")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  command -v apt-get >/dev/null || { log "no apt-get to install ${missing[*]}"; exit 3; }
  log "installing ${missing[*]} with apt-get"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    slurmctld slurmd slurm-client munge >/dev/null
}

start_munge() {
  if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then return 0; fi   # one runs already
  mkdir -p /etc/munge /run/munge /var/lib/munge /var/log/munge
  if [ ! -s /etc/munge/munge.key ]; then
    dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
  fi
  chown munge:munge /etc/munge /etc/munge/munge.key /run/munge /var/lib/munge /var/log/munge
  chmod 0700 /etc/munge; chmod 0400 /etc/munge/munge.key
  runuser -u munge -- /usr/sbin/munged --force
  pgrep -u munge -n -x munged > "$SCRATCH/munged.pid" || true
  for _ in $(seq 50); do munge -n | unmunge >/dev/null 2>&1 && return 0; sleep 0.1; done
  log "munged did not start"; exit 1
}

write_conf() {
  local host cpus mem
  host=$(hostname -s)
  cpus=$(getconf _NPROCESSORS_ONLN)     # not nproc: it honours OMP_NUM_THREADS
  mem=$(awk '/MemTotal/ {print int($2 / 1024 * 0.8)}' /proc/meminfo)
  mkdir -p "$SCRATCH/state" "$SCRATCH/spool"
  cat > "$SLURM_CONF" <<CONF
ClusterName=sensbook
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$SCRATCH/state
SlurmdSpoolDir=$SCRATCH/spool
SlurmctldPidFile=$SCRATCH/slurmctld.pid
SlurmdPidFile=$SCRATCH/slurmd.pid
SlurmctldLogFile=$SCRATCH/slurmctld.log
SlurmdLogFile=$SCRATCH/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
ReturnToService=2
MinJobAge=30
KillWait=5
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
}

case "$cmd" in
  start)
    [ "$(id -u)" = 0 ] || { log "needs root"; exit 3; }
    install_packages
    mkdir -p "$SCRATCH"
    "$0" stop "$SCRATCH" 2>/dev/null || true
    write_conf
    start_munge
    /usr/sbin/slurmctld -f "$SLURM_CONF"
    /usr/sbin/slurmd -f "$SLURM_CONF"
    for _ in $(seq 150); do
      state=$(sinfo -h -o %t 2>/dev/null || true)
      case "$state" in idle*|mix*|alloc*) log "up: node $(hostname -s) $state ($SLURM_CONF)"; exit 0;; esac
      sleep 0.2
    done
    log "the node did not become idle (sinfo: ${state:-nothing}); logs in $SCRATCH"; exit 1
    ;;
  stop)
    [ -n "$(ls "$SCRATCH"/*.pid 2>/dev/null)" ] || exit 0
    # Jobs end before slurmd does: cancel them, give Slurm KillWait to stop them, then SIGKILL
    # whatever job process is left (`scontrol listpids`: the processes of this node's jobs).
    if [ -s "$SCRATCH/slurmd.pid" ] && kill -0 "$(cat "$SCRATCH/slurmd.pid")" 2>/dev/null; then
      scancel --me 2>/dev/null || true
      for _ in $(seq 100); do
        [ -z "$(scontrol listpids 2>/dev/null | awk 'NR > 1 {print $1}')" ] && break; sleep 0.2
      done
      for pid in $(scontrol listpids 2>/dev/null | awk 'NR > 1 {print $1}'); do
        kill -9 "$pid" 2>/dev/null || true
      done
    fi
    stop_pid "$SCRATCH/slurmd.pid"
    stop_pid "$SCRATCH/slurmctld.pid"
    stop_pid "$SCRATCH/munged.pid"
    ;;
  env)
    echo "export SLURM_CONF=$SLURM_CONF"
    ;;
  *)
    echo "usage: $0 start|stop|env [SCRATCH]" >&2; exit 2
    ;;
esac
