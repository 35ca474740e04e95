#!/usr/bin/env bash
# A one-node Slurm cluster on this Debian machine, for exercising workflow/profiles/slurm.
#
#   tools/slurm/one-node.sh up     install slurm-wlm + munge if missing, write the config, start
#                                  munged, slurmctld and slurmd, wait until the node is idle
#   tools/slurm/one-node.sh down   stop the daemons that `up` started (and only those)
#   tools/slurm/one-node.sh status what runs, sinfo
#
# Root only (apt-get, daemons, /etc/slurm). No systemd needed: the daemons are started directly.
# The cluster:
#   - one node, $(hostname -s), with the CPUs and memory `slurmd -C` reports;
#   - partitions `cpu` (default) and `gpu`, both that node, as the profile asks;
#   - one stand-in `gpu` GRES (gres.conf: File=/dev/null Count=1; slurmd drops a gpu without a file), so that
#     the profile's `gpu: 1` (sbatch --gpus=1) is scheduled as on a GPU site, one capture at a
#     time; there is no GPU behind it, the workflow runs with device=cpu;
#   - no accounting (no slurmdbd): the executor plugin is told to read job states with squeue
#     (--slurm-status-command squeue); MinJobAge=3600 keeps finished jobs visible to squeue.
# Files: /etc/slurm/slurm.conf and gres.conf (marked as written here; a config without the mark is
# never overwritten), state and logs under /var/spool/slurm* and /var/log/slurm, and the list of
# daemons this script started in /run/attnprof-slurm/started.
set -euo pipefail

MARK="# written by attnprof tools/slurm/one-node.sh"
STATE=/run/attnprof-slurm
CONF=/etc/slurm/slurm.conf
GRES=/etc/slurm/gres.conf
LOGDIR=/var/log/slurm

say() { echo "[one-node] $*"; }
die() {
	echo "[one-node] ERROR: $*" >&2
	exit 1
}

need_root() { [ "$(id -u)" = 0 ] || die "run as root (apt-get, daemons, /etc/slurm)"; }

install_packages() {
	local missing=()
	for p in slurmctld slurmd slurm-client munge; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
	done
	if [ ${#missing[@]} -eq 0 ]; then
		say "packages present: $(dpkg-query -W -f='${Version}' slurmctld) (slurm), $(dpkg-query -W -f='${Version}' munge) (munge)"
		return
	fi
	say "installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	if ! apt-cache show "${missing[@]}" >/dev/null 2>&1; then
		apt-get update -q >/dev/null
	fi
	apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
	say "installed: $(dpkg-query -W -f='${Version}' slurmctld) (slurm), $(dpkg-query -W -f='${Version}' munge) (munge)"
}

write_config() {
	local host node_line
	host=$(hostname -s)
	getent hosts "$host" >/dev/null || die "host name $host does not resolve (add it to /etc/hosts)"
	for f in "$CONF" "$GRES"; do
		if [ -e "$f" ] && ! head -1 "$f" | grep -qF "$MARK"; then
			die "$f exists and was not written by this script: not overwriting a real cluster's config"
		fi
	done
	# e.g. "NodeName=vm CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=24105"
	node_line=$(slurmd -C | head -1)
	case "$node_line" in NodeName=*) ;; *) die "slurmd -C gave: $node_line" ;; esac
	mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd "$LOGDIR"
	chown slurm:slurm /var/spool/slurmctld "$LOGDIR"
	cat >"$CONF" <<EOF
$MARK
# A one-node test cluster for workflow/profiles/slurm; see that script.
ClusterName=attnprof
SlurmctldHost=$host
AuthType=auth/munge
CredType=cred/munge
SlurmUser=slurm
SlurmctldPort=6817
SlurmdPort=6818
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/slurmd.pid
SlurmctldLogFile=$LOGDIR/slurmctld.log
SlurmdLogFile=$LOGDIR/slurmd.log
# no cgroups here: track job processes through /proc, no task binding
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
# finished jobs stay visible to squeue for an hour: the executor plugin reads job states from it
# (no accounting here), and the run's check lists the run's jobs with it afterwards
MinJobAge=3600
SchedulerParameters=sched_interval=2
GresTypes=gpu
$node_line Gres=gpu:1 State=UNKNOWN
PartitionName=cpu Nodes=$host Default=YES MaxTime=INFINITE State=UP
PartitionName=gpu Nodes=$host MaxTime=INFINITE State=UP
EOF
	cat >"$GRES" <<EOF
$MARK
# a stand-in GPU: lets sbatch --gpus=1 be scheduled on a machine without one. slurmd ignores a
# gpu GRES without a device file, so the file is /dev/null (no cgroup device limits here).
NodeName=$host Name=gpu File=/dev/null Count=1
EOF
	say "wrote $CONF: ${node_line} Gres=gpu:1, partitions cpu (default) and gpu"
}

running() { [ -f "$STATE/$1.pid" ] && kill -0 "$(cat "$STATE/$1.pid")" 2>/dev/null; }

mark_started() { echo "$1" >>"$STATE/started"; }

start_munge() {
	mkdir -p /run/munge && chown munge:munge /run/munge && chmod 755 /run/munge
	if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
		say "munged already running"
		return
	fi
	[ -s /etc/munge/munge.key ] || { mungekey --create --keyfile /etc/munge/munge.key && chown munge:munge /etc/munge/munge.key && chmod 400 /etc/munge/munge.key; }
	runuser -u munge -- /usr/sbin/munged
	for _ in $(seq 50); do
		munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break
		sleep 0.1
	done
	munge -n | unmunge >/dev/null || die "munged does not answer"
	cp /run/munge/munged.pid "$STATE/munged.pid"
	mark_started munged
	say "started munged (pid $(cat "$STATE/munged.pid"))"
}

start_daemon() { # slurmctld | slurmd
	local d=$1
	if running "$d"; then
		say "$d already running (pid $(cat "$STATE/$d.pid"))"
		return
	fi
	"/usr/sbin/$d" || die "$d did not start; see $LOGDIR/$d.log"
	for _ in $(seq 50); do
		running "$d" && break
		sleep 0.1
	done
	running "$d" || die "$d did not start; see $LOGDIR/$d.log"
	mark_started "$d"
	say "started $d (pid $(cat "$STATE/$d.pid"))"
}

wait_idle() {
	local host state
	host=$(hostname -s)
	for _ in $(seq 120); do
		state=$(sinfo -h -n "$host" -o '%t' 2>/dev/null | sort -u | tr '\n' ' ')
		case "$state" in
		"idle ") break ;;
		*drain* | *down*) scontrol update nodename="$host" state=resume >/dev/null 2>&1 || true ;;
		*inval*) break ;; # the node does not match the config (sinfo -R says how): no use waiting
		esac
		sleep 0.5
	done
	[ "$state" = "idle " ] || {
		sinfo -R >&2 || true
		die "node $host is '$state', not idle, after 60 s; see $LOGDIR/slurmctld.log and slurmd.log"
	}
	say "node $host idle:"
	sinfo -o '%P %a %D %t %c %m %G' | sed 's/^/[one-node]   /'
}

up() {
	need_root
	local t0=$SECONDS
	mkdir -p "$STATE"
	install_packages
	if running slurmctld && running slurmd; then
		say "slurmctld and slurmd already running: using them"
	else
		write_config
		start_munge
		start_daemon slurmctld
		start_daemon slurmd
	fi
	wait_idle
	say "up in $((SECONDS - t0)) s"
}

down() {
	need_root
	[ -f "$STATE/started" ] || {
		say "nothing started by this script is recorded in $STATE/started: stopping nothing"
		return
	}
	# stop in reverse order of starting: slurmd, slurmctld, munged
	for d in $(tac "$STATE/started"); do
		if [ -f "$STATE/$d.pid" ]; then
			pid=$(cat "$STATE/$d.pid")
			if kill -0 "$pid" 2>/dev/null; then
				kill "$pid"
				for _ in $(seq 50); do
					kill -0 "$pid" 2>/dev/null || break
					sleep 0.1
				done
				say "stopped $d (pid $pid)"
			fi
			rm -f "$STATE/$d.pid"
		fi
	done
	rm -f "$STATE/started"
}

status() {
	for d in munged slurmctld slurmd; do
		if running "$d"; then echo "$d: running (pid $(cat "$STATE/$d.pid"))"; else echo "$d: not running (as far as $STATE knows)"; fi
	done
	sinfo 2>&1 || true
}

case "${1:-}" in
up) up ;;
down) down ;;
status) status ;;
*)
	echo "usage: $0 up|down|status" >&2
	exit 2
	;;
esac
