#!/usr/bin/env bash
# One command for a machine with NVIDIA GPUs: install databricks.air from wheels, run every GPU check, print a table.
#
#   bash bench/gpu_check.sh [--cpu] [WHEEL_DIR]
#
# WHEEL_DIR holds this project's wheel (`pip wheel --no-deps -w WHEEL_DIR .`) and, optionally, deepspeed and the
# dependencies the machine lacks; every *.whl in it is installed with `pip install --no-index --no-deps` into a
# temporary directory put first on PYTHONPATH (nothing in the machine's environment changes; without pip, the
# wheels are unpacked directly). Without WHEEL_DIR, the databricks.air the interpreter already has is checked.
# The interpreter is $PYTHON, or python3.
#
# Checks (bench/_gpu_checks.py; each isolated with its own wall-clock cap, run by bench/gpu_check.py): machine
# (GPUs, driver, torch, CUDA, NCCL), NCCL DDP and FSDP2 on every GPU through .distributed(), DeepSpeed ZeRO-2 if
# installed, a call after the caller initialised CUDA, fresh random seeds per rank and call, cold and warm launch against torchrun, a failing rank, the
# timeout, and DDP steps per second against torchrun (bench/ddp_step_overhead.py).
#
# --cpu (or GPU_CHECK_CPU=1) is the dry run: the same checks on 2 CPU ranks over gloo, for a machine without GPUs.
# Output: the table on stdout; with $OUT set, also $OUT/gpu_check.txt (the table, rewritten after every check) and
# $OUT/gpu_check.log (everything). Takes about 4 minutes; the checks stop starting after GPU_CHECK_BUDGET seconds
# (default 450), so the whole run stays under 8 minutes. GPU_CHECK_ONLY=ddp,fsdp runs only the checks named.
# GPU_CHECK_DATA=1 then also runs bench/data_loading.py and bench/data_checkpoint.py pinned to two CPUs (about 3
# more minutes), appending their tables to the output.
# Exit status 1 if any check FAILed (a MISS, a missed performance target, does not count).
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
python="${PYTHON:-python3}"
mode_flag=()
wheel_dir=""
for argument in "$@"; do
    case "$argument" in
        --cpu) mode_flag=(--cpu) ;;
        -h|--help) sed -n '2,22p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "gpu_check.sh: unknown option $argument (use --cpu or a wheel directory)" >&2; exit 2 ;;
        *) wheel_dir="$argument" ;;
    esac
done
if [[ "${GPU_CHECK_CPU:-0}" == "1" ]]; then mode_flag=(--cpu); fi

scratch="$(mktemp -d "${TMPDIR:-/tmp}/air-gpu-check.XXXXXX")"
trap 'rm -rf "$scratch"' EXIT
if [[ -n "${OUT:-}" ]]; then
    mkdir -p "$OUT"
    log="$OUT/gpu_check.log"
    table="$OUT/gpu_check.txt"
else
    log="$(mktemp "${TMPDIR:-/tmp}/gpu_check-XXXXXX.log")"  # kept: the table's last line names it
    table="$scratch/gpu_check.txt"
fi
: > "$log"
say() { echo "gpu_check: $*" | tee -a "$log"; }

say "interpreter $(command -v "$python") ($("$python" -c 'import sys; print(sys.version.split()[0])' 2>&1))"
if [[ -n "$wheel_dir" ]]; then
    shopt -s nullglob
    wheels=("$wheel_dir"/*.whl)
    shopt -u nullglob
    if [[ ${#wheels[@]} -eq 0 ]]; then
        say "no *.whl in $wheel_dir: build one with 'pip wheel --no-deps -w $wheel_dir .'"
        exit 2
    fi
    site="$scratch/site"
    mkdir -p "$site"
    # This project's wheel must install; the others (deepspeed and what it needs) are optional: if they fail,
    # the DeepSpeed check says so and the rest still runs.
    ours=() extras=()
    for wheel in "${wheels[@]}"; do
        case "$(basename "$wheel")" in
            databricks_air_oss-*) ours+=("$wheel") ;;
            *) extras+=("$wheel") ;;
        esac
    done
    if [[ ${#ours[@]} -ne 1 ]]; then
        say "expected exactly one databricks_air_oss-*.whl in $wheel_dir, found ${#ours[@]}"
        exit 2
    fi
    if [[ "${GPU_CHECK_NO_PIP:-0}" != "1" ]] && "$python" -m pip --version >>"$log" 2>&1; then
        install() {
            PIP_DISABLE_PIP_VERSION_CHECK=1 "$python" -m pip install --no-index --no-deps --no-compile \
                --target "$site" "$@" >>"$log" 2>&1
        }
    else
        say "no pip for $python: unpacking the wheels directly"
        install() { "$python" "$here/_unpack_wheels.py" "$site" "$@" >>"$log" 2>&1; }
    fi
    say "installing $(basename "${ours[0]}") and ${#extras[@]} other wheel(s) into $site"
    if ! install "${ours[0]}"; then
        say "installing ${ours[0]} failed; the log says why:"
        tail -n 30 "$log"
        exit 2
    fi
    if [[ ${#extras[@]} -gt 0 ]] && ! install "${extras[@]}"; then
        say "installing the other wheels failed (see the log); checks that need them will say so"
    fi
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
fi
export DATABRICKS_AIR_MLFLOW=0  # mlflow need not be installed: tracking is off for every check
if ! "$python" -c 'import databricks.air as air; print("databricks.air", air.__version__, "from", air.__file__)' \
    2>&1 | tee -a "$log"; then
    say "databricks.air cannot be imported: pass the directory holding its wheel"
    exit 2
fi
has_cuda='import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'
if [[ ${#mode_flag[@]} -eq 0 ]] && ! "$python" -c "$has_cuda"; then
    say "torch sees no CUDA GPU here: run 'bash bench/gpu_check.sh --cpu' for the CPU dry run"
    exit 2
fi

"$python" "$here/gpu_check.py" "${mode_flag[@]}" --table "$table" --log "$log" \
    --budget "${GPU_CHECK_BUDGET:-450}" ${GPU_CHECK_ONLY:+--only "$GPU_CHECK_ONLY"}
status=$?

# The data benchmarks need no GPU but a quiet machine, which a GPU host lent for a check usually is: pinned to two
# CPUs, they are comparable with CI's 2-vCPU figures without the shared VM's noise.
if [[ "${GPU_CHECK_DATA:-0}" == "1" ]]; then
    pin=()
    if command -v taskset >/dev/null; then pin=(taskset -c 0,1); fi
    for bench in data_loading data_checkpoint; do
        say "bench/$bench.py ${pin[*]:+under ${pin[*]}}"
        "${pin[@]}" "$python" "$here/$bench.py" 2>&1 | tee -a "$log" >>"$table"
    done
    cat "$table"
fi
exit $status
