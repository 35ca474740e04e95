#!/usr/bin/env bash
# Run the CPU default through workflow/profiles/slurm on a one-node Slurm cluster, and check the report.
#
#   tools/slurm/run-cpu-default.sh [--keep] [--timeout SECONDS] [--run NAME]
#
# Root, Debian 12. Steps (each timed): the venv of the README (if .venv has no snakemake yet),
# snakemake-executor-plugin-slurm (pinned), the cluster (tools/slurm/one-node.sh up), the run:
#
#   snakemake --profile workflow/profiles/slurm --config device=cpu run=NAME \
#     --slurm-status-command squeue --slurm-init-seconds-before-status-checks 2 \
#     --slurm-keep-successful-logs --slurm-logdir DIR report
#
# and the checks (tools/slurm/check_run.py). The profile file is used as it is; the options added
# on the command line are about this test cluster, not the workflow: no accounting (so squeue, not
# sacct, gives job states), quick status polls, and the Slurm logs kept for the check.
# Writes results/NAME (default slurm-cpu, removed first, so that every job runs) and a log folder
# under /tmp. Stops the daemons at the end if this run started them, unless --keep.
# Exit status: 0 when every check passed.
set -euo pipefail
cd "$(dirname "$0")/../.."

PLUGIN=snakemake-executor-plugin-slurm==2.8.0
RUN=slurm-cpu
TIMEOUT=900
KEEP=0
while [ $# -gt 0 ]; do
	case "$1" in
	--keep) KEEP=1 ;;
	--timeout)
		TIMEOUT=$2
		shift
		;;
	--run)
		RUN=$2
		shift
		;;
	*)
		echo "usage: $0 [--keep] [--timeout SECONDS] [--run NAME]" >&2
		exit 2
		;;
	esac
	shift
done

say() { echo "[slurm-cpu] $*"; }
T_START=$SECONDS
declare -A TOOK

# 1. the README's venv (command 1 without the run), only when missing
t=$SECONDS
if [ ! -x .venv/bin/snakemake ]; then
	say "creating .venv (torch==2.13.0 from the local wheel folder, as CI does; attnprof[test])"
	python3 -m venv .venv
	.venv/bin/pip install -q torch==2.13.0 -e '.[test]' 2>&1 | grep -v "^WARNING: Location" || true
	.venv/bin/snakemake --version >/dev/null
else
	say ".venv present: $(.venv/bin/pip list 2>/dev/null | awk '$1 == "torch" || $1 == "snakemake" {printf "%s %s ", $1, $2}')"
fi
TOOK[venv]=$((SECONDS - t))

# 2. the executor plugin, pinned
t=$SECONDS
.venv/bin/pip install -q "$PLUGIN" 2>&1 | grep -v "^WARNING: Location" || true
say "$(.venv/bin/pip show snakemake-executor-plugin-slurm 2>/dev/null | awk '/^Version/{print "executor plugin " $2}')"
TOOK[plugin]=$((SECONDS - t))

# 3. the cluster; stop it at the end only if this run started it
t=$SECONDS
STARTED=/run/attnprof-slurm/started
lines() { if [ -f "$1" ]; then wc -l <"$1"; else echo 0; fi; }
before=$(lines "$STARTED")
tools/slurm/one-node.sh up
after=$(lines "$STARTED")
TOOK[cluster]=$((SECONDS - t))
stop_cluster() {
	if [ "$after" -gt "$before" ] && [ "$KEEP" = 0 ]; then
		tools/slurm/one-node.sh down
	elif [ "$after" -gt "$before" ]; then
		say "--keep: cluster left running (tools/slurm/one-node.sh down stops it)"
	else
		say "the cluster was up before this run: left running"
	fi
}
trap stop_cluster EXIT

# 4. the run
WORK=$(mktemp -d /tmp/attnprof-slurm.XXXXXX)
rm -rf "results/$RUN"
CMD=(.venv/bin/snakemake --profile workflow/profiles/slurm --config device=cpu "run=$RUN"
	--slurm-status-command squeue --slurm-init-seconds-before-status-checks 2
	--slurm-keep-successful-logs --slurm-logdir "$WORK/slurm_logs" report)
say "running (log: $WORK/snakemake.log, timeout ${TIMEOUT}s): ${CMD[*]}"
t=$SECONDS
rc=0
timeout "$TIMEOUT" "${CMD[@]}" >"$WORK/snakemake.log" 2>&1 || rc=$?
TOOK[run]=$((SECONDS - t))
if [ "$rc" != 0 ]; then
	tail -40 "$WORK/snakemake.log" >&2
	say "FAILED: snakemake exited $rc after ${TOOK[run]} s$([ "$rc" = 124 ] && echo ' (timeout)')"
	exit 1
fi
say "snakemake: $(grep -E 'steps \(100%\) done' "$WORK/snakemake.log" | tail -1) in ${TOOK[run]} s"

# 5. the checks
t=$SECONDS
crc=0
.venv/bin/python tools/slurm/check_run.py "results/$RUN" "$WORK/snakemake.log" "$WORK/slurm_logs" || crc=$?
TOOK[check]=$((SECONDS - t))

say "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) (2 cores: above 2, other work shared the machine)"
say "wall time: venv ${TOOK[venv]} s, plugin ${TOOK[plugin]} s, cluster up ${TOOK[cluster]} s, run ${TOOK[run]} s, check ${TOOK[check]} s; total $((SECONDS - T_START)) s"
if [ "$crc" != 0 ]; then
	say "FAILED: see the checks above"
	exit 1
fi
say "PASSED: results/$RUN/report.html and report.pdf made through Slurm"
