#!/usr/bin/env bash
# A one-node Slurm cluster on this machine: munged, MariaDB + slurmdbd (so `sacct` works: submitit reads
# job states through it), slurmctld and slurmd, with this host's name, CPUs and memory.
#
# Idempotent: run it again and it only starts what is not running. Needs root (it writes /etc/slurm and
# starts daemons). Tried on Debian 12; on a laptop: `sudo .ci/slurm-setup.sh`, then
# `pytest --agent=sample --rexmle-data=synthetic --rexmle-runtime=slurm`.
# Stop everything again with `.ci/slurm-setup.sh stop`.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

if [[ "${1:-}" == stop ]]; then
    for daemon in slurmd slurmctld slurmdbd munged; do
        pid=$(pgrep -x "$daemon" || true)
        [[ -n "$pid" ]] && kill $pid || true
    done
    exit 0
fi

need=()
for pair in sbatch:slurm-wlm slurmctld:slurmctld slurmd:slurmd slurmdbd:slurmdbd munged:munge mariadbd:mariadb-server; do
    command -v "${pair%%:*}" >/dev/null 2>&1 || [[ -x "/usr/sbin/${pair%%:*}" ]] || need+=("${pair#*:}")
done
if ((${#need[@]})); then
    (apt-get install -y -q "${need[@]}" || (apt-get update -q && apt-get install -y -q "${need[@]}")) >/dev/null
fi

host=$(hostname -s)
# REXMLE_SLURM_FAKE_GPUS=N: N placeholder GPUs (character devices like /dev/null) as gres, so a machine
# without a GPU exercises the whole --gres=gpu path: Slurm allocates them and sets CUDA_VISIBLE_DEVICES
fake_gpus=${REXMLE_SLURM_FAKE_GPUS:-0}
gres_types="" node_gres=""
if ((fake_gpus > 0)); then
    for i in $(seq 0 $((fake_gpus - 1))); do
        [[ -e /run/rexmle-fake-gpu$i ]] || mknod -m 0666 /run/rexmle-fake-gpu$i c 1 3
    done
    gres_types=$'GresTypes=gpu\nAccountingStorageTRES=gres/gpu' node_gres=" Gres=gpu:${fake_gpus}"
    { echo "AutoDetect=off"; for i in $(seq 0 $((fake_gpus - 1))); do echo "Name=gpu File=/run/rexmle-fake-gpu$i"; done; } \
        > /etc/slurm/gres.conf
else
    rm -f /etc/slurm/gres.conf
fi
cpus=$(nproc)
# leave 1 GiB (or a quarter on a small box) to the system
mem_mb=$(awk '/MemTotal/ {print int($2 / 1024)}' /proc/meminfo)
real_mb=$(( mem_mb > 4096 ? mem_mb - 1024 : mem_mb * 3 / 4 ))

install -d -o slurm -g slurm /var/lib/slurm/slurmctld /var/log/slurm /run/slurm
install -d /var/lib/slurm/slurmd /etc/slurm
install -d -o munge -g munge -m 0700 /etc/munge /var/lib/munge /var/log/munge
install -d -o munge -g munge -m 0755 /run/munge

conf=$(cat <<EOF
# written by .ci/slurm-setup.sh: one node, this host
ClusterName=rexmle
${gres_types}
SlurmctldHost=${host}
SlurmUser=slurm
AuthType=auth/munge
StateSaveLocation=/var/lib/slurm/slurmctld
SlurmdSpoolDir=/var/lib/slurm/slurmd
SlurmctldPidFile=/run/slurm/slurmctld.pid
SlurmdPidFile=/run/slurm/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
# no cgroup plugins: they need a cgroup v2 / systemd setup a CI container rarely has; the agent's own
# isolation (bubblewrap or Docker) runs inside the job and keeps its guarantees
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherFrequency=5
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
JobRequeue=0
KillWait=10
MinJobAge=300
SchedulerParameters=defer_batch
SlurmctldTimeout=30
SlurmdTimeout=60
NodeName=${host}${node_gres} CPUs=${cpus} RealMemory=${real_mb} State=UNKNOWN
PartitionName=debug Nodes=${host} Default=YES MaxTime=INFINITE State=UP
EOF
)
changed=0
if [[ ! -f /etc/slurm/slurm.conf ]] || [[ "$(cat /etc/slurm/slurm.conf)" != "$conf" ]]; then
    printf '%s\n' "$conf" > /etc/slurm/slurm.conf
    changed=1
fi
printf 'CgroupPlugin=autodetect\nConstrainCores=no\nConstrainRAMSpace=no\n' > /etc/slurm/cgroup.conf

if [[ ! -s /etc/munge/munge.key ]]; then
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1 count=1024 status=none
fi
chown munge:munge /etc/munge/munge.key
chmod 0400 /etc/munge/munge.key
pgrep -x munged >/dev/null || su -s /bin/sh munge -c /usr/sbin/munged

# accounting database (sacct answers from it)
if ! pgrep -x mariadbd >/dev/null; then
    install -d -o mysql -g mysql /run/mysqld
    [[ -d /var/lib/mysql/mysql ]] || mariadb-install-db --user=mysql >/dev/null
    (mariadbd --user=mysql >/var/log/slurm/mariadb.log 2>&1 &)
    for _ in $(seq 60); do mariadb -e 'select 1' >/dev/null 2>&1 && break; sleep 1; done
fi
# The database password is random, made here once and kept root-only (0600) in $db_secret; nothing in
# the repository can open the accounting database. It reaches MariaDB on stdin (never a command line,
# which /proc shows to every uid) and slurmdbd through its own 0600 config. Re-running keeps the secret;
# a cluster set up by an older version of this script (a fixed password) is moved to a random one, and
# its running slurmdbd restarted so that it reconnects with the new password.
db_secret=/etc/slurm/rexmle-slurmdbd.secret
if [[ ! -s "$db_secret" ]]; then
    (umask 077; tr -dc 'A-Za-z0-9' </dev/urandom | head -c 40 > "$db_secret.new" || true; mv "$db_secret.new" "$db_secret")
fi
chown root:root "$db_secret"
chmod 0600 "$db_secret"
db_pass=$(cat "$db_secret")
[[ "$db_pass" =~ ^[A-Za-z0-9]{40}$ ]] || { echo "slurm: $db_secret is not a 40-character password" >&2; exit 1; }
mariadb <<SQL
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '${db_pass}';
ALTER USER 'slurm'@'localhost' IDENTIFIED BY '${db_pass}';
GRANT ALL ON slurm_acct_db.* TO 'slurm'@'localhost';
FLUSH PRIVILEGES;
SQL
dbd_conf=$(cat <<EOF
AuthType=auth/munge
DbdHost=localhost
SlurmUser=slurm
PidFile=/run/slurm/slurmdbd.pid
LogFile=/var/log/slurm/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=localhost
StorageUser=slurm
StoragePass=${db_pass}
StorageLoc=slurm_acct_db
EOF
)
dbd_changed=0
if [[ ! -f /etc/slurm/slurmdbd.conf ]] || [[ "$(cat /etc/slurm/slurmdbd.conf)" != "$dbd_conf" ]]; then
    (umask 077; printf '%s\n' "$dbd_conf" > /etc/slurm/slurmdbd.conf.new)
    chown slurm:slurm /etc/slurm/slurmdbd.conf.new
    mv /etc/slurm/slurmdbd.conf.new /etc/slurm/slurmdbd.conf
    dbd_changed=1
fi
chown slurm:slurm /etc/slurm/slurmdbd.conf
chmod 0600 /etc/slurm/slurmdbd.conf
unset db_pass dbd_conf
pid=$(pgrep -x slurmdbd || true)
if [[ -n "$pid" ]] && ((dbd_changed)); then  # it holds the old password: restart it with the new one
    kill $pid; while kill -0 $pid 2>/dev/null; do sleep 0.2; done
fi
if ! pgrep -x slurmdbd >/dev/null; then
    /usr/sbin/slurmdbd
    for _ in $(seq 60); do sacctmgr -n list cluster >/dev/null 2>&1 && break; sleep 1; done
fi
sacctmgr -n list cluster format=cluster | grep -qw rexmle || sacctmgr -i add cluster rexmle >/dev/null

if ((changed)); then  # node resources changed: restart (reconfigure does not take new gres)
    for daemon in slurmd slurmctld; do
        pid=$(pgrep -x "$daemon" || true)
        if [[ -n "$pid" ]]; then kill $pid; while kill -0 $pid 2>/dev/null; do sleep 0.2; done; fi
    done
fi
pgrep -x slurmctld >/dev/null || /usr/sbin/slurmctld
pgrep -x slurmd >/dev/null || /usr/sbin/slurmd

for _ in $(seq 90); do
    state=$(sinfo -h -n "$host" -o %T 2>/dev/null || true)
    case "$state" in
        idle*|mixed*|allocated*) echo "slurm: node $host $state ($cpus CPUs, ${real_mb} MB)"; exit 0 ;;
        down*|drain*) scontrol update nodename="$host" state=resume >/dev/null 2>&1 || true ;;
    esac
    sleep 1
done
echo "slurm: node $host did not become idle; see /var/log/slurm/" >&2
sinfo >&2 || true
exit 1
