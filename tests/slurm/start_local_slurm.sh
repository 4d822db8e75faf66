#!/usr/bin/env bash
# A one-node Slurm on this machine for the tests (tests/e2e/test_slurm.py): munge, slurmctld and slurmd on
# localhost from Debian's packages, with ProctrackType=proctrack/linuxproc and TaskPlugin=task/none (no
# cgroups needed). Root only. Idempotent: does nothing when the local Slurm already answers.
#
#   bash tests/slurm/start_local_slurm.sh        # exit 0: `sinfo` shows the node idle
#
# The configuration lives in /etc/slurm/slurm.conf (written only when absent or written by this script).
set -euo pipefail

if [ "$(id -u)" != 0 ]; then
  echo "start_local_slurm.sh: needs root (it installs packages and starts daemons)" >&2
  exit 1
fi

ready() { sinfo -h -o '%T' 2>/dev/null | grep -Eq '^(idle|mixed|allocated)'; }
if command -v sinfo >/dev/null && ready; then
  echo "local Slurm already running"
  exit 0
fi

if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null || ! command -v munged >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq slurm-wlm munge >/dev/null
fi

# munge: a key, then the daemon (as the munge user, as the Debian service does)
mkdir -p /etc/munge /var/lib/munge /var/log/munge /run/munge
if [ ! -s /etc/munge/munge.key ]; then
  if command -v mungekey >/dev/null; then mungekey --create --force >/dev/null; else
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none; fi
fi
chown -R munge:munge /etc/munge /var/lib/munge /var/log/munge /run/munge
chmod 0700 /etc/munge && chmod 0400 /etc/munge/munge.key
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
  runuser -u munge -- /usr/sbin/munged
  for _ in $(seq 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
fi

# slurm.conf: this machine as the only node, one partition "debug", requeue allowed
host=$(hostname -s)
node=$(slurmd -C | head -n1 | sed -E 's/ UpTime=.*//; s/RealMemory=([0-9]+)/RealMemory=\1/')
mem=$(echo "$node" | sed -E 's/.*RealMemory=([0-9]+).*/\1/')
node=$(echo "$node" | sed -E "s/RealMemory=[0-9]+/RealMemory=$((mem * 9 / 10))/")
conf=/etc/slurm/slurm.conf
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/slurm
if [ ! -f "$conf" ] || grep -q "written by start_local_slurm.sh" "$conf"; then
  cat > "$conf" <<CONF
# written by start_local_slurm.sh (tests): a one-node Slurm on localhost
ClusterName=localtest
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
JobRequeue=1
ReturnToService=2
KillWait=10
MinJobAge=3600
SlurmctldPidFile=/run/slurm/slurmctld.pid
SlurmdPidFile=/run/slurm/slurmd.pid
SlurmdSpoolDir=/var/spool/slurmd
StateSaveLocation=/var/spool/slurmctld
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
$node NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
fi

pgrep -x slurmctld >/dev/null || slurmctld
pgrep -x slurmd >/dev/null || slurmd
for _ in $(seq 150); do
  if ready; then echo "local Slurm running: $(sinfo -h -o '%P %D %T %c CPUs')"; exit 0; fi
  scontrol update NodeName="$host" State=RESUME >/dev/null 2>&1 || true
  sleep 0.2
done
echo "start_local_slurm.sh: Slurm did not come up; see /var/log/slurm/slurmctld.log and slurmd.log" >&2
sinfo >&2 || true
exit 1
