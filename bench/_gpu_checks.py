"""The checks of ``bench/gpu_check.sh``, one per invocation: ``python bench/_gpu_checks.py CHECK MODE RESULT_FILE``.

Each check runs in its own interpreter (``bench/gpu_check.py`` starts it, caps its wall-clock time and kills what
it leaves), so a hung NCCL call or a crashed rank never stops the checks after it. A check writes one JSON object
to RESULT_FILE: ``{"status": "PASS" | "FAIL" | "SKIP" | "MISS", "detail": "...", "figures": {...}}`` (MISS: it
works, but a performance target was missed); everything it prints goes to the full log.

MODE is ``gpu`` (every visible GPU, NCCL) or ``cpu`` (the dry run: 2 CPU ranks over gloo, the same code paths).

The rank functions below live in ``__main__`` when this file runs, so cloudpickle ships them to the ranks by value:
the ranks never need ``bench/`` on their path.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Any, Callable, Dict, List, Optional

CPU_RANKS = 2
TRAIN_STEPS = 40
LAUNCH_COLD_RUNS = 3
LAUNCH_WARM_CALLS = 5
TORCHRUN_RUNS = 3
TIMEOUT_LIMIT = 5
TIMEOUT_SLACK = 5.0  # the timeout error must come within this many seconds after the limit
LEFTOVER_GRACE = 3.0  # seconds a rank process may take to vanish after the call has returned or raised


# --- what runs in the ranks ------------------------------------------------------------------------------------


def join_group(cuda: bool, framework: str = "torch") -> Any:
    """Join the process group the way users do (nccl on GPUs, gloo on CPU ranks); return this rank's device."""
    import torch
    import torch.distributed as dist

    world = int(os.environ["WORLD_SIZE"])
    if cuda:
        local_rank = int(os.environ["LOCAL_RANK"])
        torch.cuda.set_device(local_rank)
        device, backend = torch.device("cuda", local_rank), "nccl"
    else:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))
        device, backend = torch.device("cpu"), "gloo"
    if framework == "deepspeed":
        if not cuda:
            os.environ["DS_ACCELERATOR"] = "cpu"  # read when deepspeed is first imported
        import deepspeed
        import deepspeed.ops

        if not cuda:  # gloo's all-reduce, not a shared-memory C++ kernel compiled on first use (minutes here)
            deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
        deepspeed.init_distributed(dist_backend=backend)
    else:
        dist.init_process_group(backend)
    return device


def train(framework: str, cuda: bool, steps: int) -> Dict[str, Any]:
    """A few real training steps of a small MLP on a fixed regression task, wrapped by ``framework``.

    ``framework`` is ``ddp`` (DistributedDataParallel), ``fsdp`` (FSDP2 ``fully_shard``) or ``deepspeed`` (ZeRO
    stage 2 from a config dict). Every rank trains on its own shard of the same data. Returns the global mean loss
    of the first and last step (all-reduced, so every rank reports the same) and a checksum of the full parameters
    (gathered where they are sharded), which must agree between ranks.
    """
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    device = join_group(cuda, framework)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 1)).to(device)
    generator = torch.Generator().manual_seed(1)
    inputs = torch.randn(128 * world, 16, generator=generator)
    targets = inputs @ torch.randn(16, 1, generator=generator) + 0.01 * torch.randn(128 * world, 1, generator=generator)
    x, y = inputs[rank::world].to(device), targets[rank::world].to(device)
    loss_fn = nn.MSELoss()

    if framework == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        wrapped: Any = DistributedDataParallel(model, device_ids=[device.index] if cuda else None)
        optimizer = torch.optim.Adam(wrapped.parameters(), lr=1e-2)
    elif framework == "fsdp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(device.type, (world,))
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, mesh=mesh)
        wrapped = fully_shard(model, mesh=mesh)
        optimizer = torch.optim.Adam(wrapped.parameters(), lr=1e-2)
    elif framework == "deepspeed":
        import deepspeed

        config = {
            "train_micro_batch_size_per_gpu": x.shape[0],
            "gradient_accumulation_steps": 1,
            "train_batch_size": x.shape[0] * world,
            "optimizer": {"type": "Adam", "params": {"lr": 1e-2, "torch_adam": True}},
            "zero_optimization": {"stage": 2},
            "steps_per_print": 10**9,
        }
        wrapped, optimizer, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    else:
        raise ValueError(f"unknown framework {framework!r}")

    losses: List[float] = []
    for _ in range(steps):
        loss = loss_fn(wrapped(x), y)
        if framework == "deepspeed":
            wrapped.backward(loss)
            wrapped.step()
        else:
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(mean.item() / world)

    checksum = 0.0
    for parameter in wrapped.parameters():
        full = parameter.full_tensor() if hasattr(parameter, "full_tensor") else parameter
        checksum += float(full.detach().double().abs().sum().item())
    dist.destroy_process_group()
    return {
        "rank": rank,
        "world": world,
        "device": str(device),
        "first_loss": losses[0],
        "last_loss": losses[-1],
        "checksum": checksum,
        "pid": os.getpid(),
    }


def all_reduce_rank(cuda: bool) -> Dict[str, Any]:
    """The trivial function of the launch and caller checks: one all_reduce of (rank + 1)."""
    import torch
    import torch.distributed as dist

    device = join_group(cuda)
    value = torch.ones(1, device=device) * (dist.get_rank() + 1)
    dist.all_reduce(value)
    result = {"rank": dist.get_rank(), "sum": float(value.item()), "device": str(device), "pid": os.getpid()}
    dist.destroy_process_group()
    return result


def seeds_rank(cuda: bool) -> Dict[str, Any]:
    """The generators' seeds as this rank found them: torch's CPU one, and CUDA's once CUDA is initialised."""
    import torch

    found = {"cpu": torch.initial_seed()}
    if cuda:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        found["cuda"] = torch.cuda.initial_seed()  # initialises CUDA, which seeds its generators
    return found


def record_pid(pid_dir: str) -> None:
    """Leave this rank's pid where the checking process looks for leftovers (renamed into place: never half-written)."""
    path = os.path.join(pid_dir, f"pid_{os.environ['RANK']}")
    with open(path + ".tmp", "w") as stream:
        stream.write(str(os.getpid()))
    os.rename(path + ".tmp", path)


def fail_on_last_rank(cuda: bool, pid_dir: str) -> None:
    """The last rank raises ValueError; the others wait in an all_reduce it never joins (only a kill ends them)."""
    import torch
    import torch.distributed as dist

    record_pid(pid_dir)
    device = join_group(cuda)
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.ones(1, device=device)  # the rank holds a CUDA context when it fails
    if rank == world - 1:
        raise ValueError(f"rank {rank} fails on purpose")
    value = torch.ones(1, device=device)
    dist.all_reduce(value)
    value.item()


def sleep_on_device(cuda: bool, pid_dir: str, seconds: float) -> None:
    """Hold a device tensor and sleep far past the call's timeout."""
    import torch

    record_pid(pid_dir)
    device = join_group(cuda)
    torch.ones(1, device=device)
    time.sleep(seconds)


# --- helpers in the checking process -----------------------------------------------------------------------------


def decorated(fn: Callable[..., Any], mode: str, timeout: Optional[float] = 600) -> Any:
    """``@distributed()`` on every GPU (gpu mode) or on 2 CPU ranks (cpu mode)."""
    from databricks.air import distributed

    if mode == "cpu":
        return distributed(accelerator_type="CPU", num_accelerators=CPU_RANKS, timeout=timeout)(fn)
    return distributed(timeout=timeout)(fn)


def rank_count(mode: str) -> int:
    if mode == "cpu":
        return CPU_RANKS
    from databricks.air import compute

    return compute.attached_gpu_count()


def result(status: str, detail: str, **figures: Any) -> Dict[str, Any]:
    return {"status": status, "detail": detail, "figures": figures}


def alive(pids: List[int]) -> List[int]:
    """The pids that still run (a zombie counts as ended: it runs no code and holds no GPU memory)."""
    import psutil

    running = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                running.append(pid)
        except psutil.NoSuchProcess:
            pass
    return running


def leftovers(pids: List[int]) -> tuple:
    """(pids still running after LEFTOVER_GRACE seconds, seconds until all were gone)."""
    start = time.monotonic()
    while True:
        running = alive(pids)
        waited = time.monotonic() - start
        if not running or waited >= LEFTOVER_GRACE:
            return running, waited
        time.sleep(0.05)


def recorded_pids(pid_dir: str) -> List[int]:
    pids = []
    for name in sorted(os.listdir(pid_dir)):
        if name.endswith(".tmp"):
            continue
        with open(os.path.join(pid_dir, name)) as stream:
            pids.append(int(stream.read()))
    return pids


def agree(values: List[float]) -> float:
    """Largest relative difference between the values."""
    spread = max(values) - min(values)
    return spread / max(abs(max(values)), 1e-12)


# --- the checks ----------------------------------------------------------------------------------------------------


def check_machine(mode: str) -> Dict[str, Any]:
    import platform

    import torch

    figures: Dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpus": os.cpu_count(),
    }
    try:
        import databricks.air as air

        figures["databricks.air"] = f"{air.__version__} from {os.path.dirname(air.__file__)}"
    except Exception as error:  # reported, and every other check will fail the same way
        return result("FAIL", f"import databricks.air failed: {error!r}", **figures)
    if mode == "cpu":
        figures["gloo"] = torch.distributed.is_gloo_available()
        return result("PASS", f"CPU dry run: {CPU_RANKS} CPU ranks over gloo", **figures)
    try:
        import pynvml

        pynvml.nvmlInit()
        count = pynvml.nvmlDeviceGetCount()
        names = [pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count)]
        figures["driver"] = pynvml.nvmlSystemGetDriverVersion()
        figures["gpu memory GiB"] = round(
            pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).total / 2**30, 1
        )
    except Exception as error:
        names, figures["nvml"] = [], repr(error)
    figures["gpus"] = f"{len(names)} x {names[0] if names else '?'}"
    figures["cuda (torch built with)"] = torch.version.cuda
    figures["cuda available"] = torch.cuda.is_available()
    figures["device count (torch)"] = torch.cuda.device_count()
    try:
        figures["nccl"] = ".".join(str(part) for part in torch.cuda.nccl.version())
    except Exception as error:
        figures["nccl"] = repr(error)
    from databricks.air import compute

    figures["ranks @distributed() starts"] = compute.attached_gpu_count()
    ok = figures["cuda available"] and names and figures["ranks @distributed() starts"] == len(names)
    return result("PASS" if ok else "FAIL", f"{figures['gpus']}, driver {figures.get('driver')}", **figures)


def check_training(framework: str, mode: str) -> Dict[str, Any]:
    if framework == "deepspeed":
        try:
            import deepspeed
        except ImportError as error:
            return result("SKIP", f"deepspeed not installed ({error})")
        version = deepspeed.__version__
    else:
        version = None
    cuda = mode == "gpu"
    start = time.perf_counter()
    ranks = decorated(train, mode).distributed(framework, cuda, TRAIN_STEPS)
    seconds = time.perf_counter() - start
    first, last = ranks[0]["first_loss"], ranks[0]["last_loss"]
    loss_spread = agree([r["last_loss"] for r in ranks])
    checksum_spread = agree([r["checksum"] for r in ranks])
    running, _ = leftovers([r["pid"] for r in ranks])
    problems = []
    if [r["rank"] for r in ranks] != list(range(len(ranks))) or ranks[0]["world"] != rank_count(mode):
        problems.append(f"ranks {[r['rank'] for r in ranks]} of world {ranks[0]['world']}")
    if not last < 0.5 * first:
        problems.append(f"loss did not fall by half ({first:.4f} -> {last:.4f})")
    if loss_spread > 1e-6 or checksum_spread > 1e-6:
        problems.append(
            f"ranks disagree (loss spread {loss_spread:.2e}, parameter checksum spread {checksum_spread:.2e})"
        )
    if running:
        problems.append(f"rank processes left running: {running}")
    detail = (
        f"{len(ranks)} ranks on {sorted({r['device'] for r in ranks})}; loss {first:.4f} -> {last:.4f} in "
        f"{TRAIN_STEPS} steps; ranks agree (checksum spread {checksum_spread:.1e}); call {seconds:.1f} s"
    )
    figures = {"ranks": len(ranks), "first loss": first, "last loss": last, "call seconds": round(seconds, 2)}
    if version:
        figures["deepspeed"] = version
    return result("FAIL" if problems else "PASS", "; ".join(problems) if problems else detail, **figures)


def check_cuda_caller(mode: str) -> Dict[str, Any]:
    import torch

    if mode == "gpu":
        torch.cuda.init()
        mine = torch.ones(4, device="cuda")
        before = "the caller initialised CUDA and holds a tensor on cuda:0"
        if not torch.cuda.is_initialized():
            return result("FAIL", "torch.cuda.init() did not initialise CUDA in the caller")
    else:  # the CPU analogue: the caller has started torch's thread pools
        mine = torch.ones(256, 256) @ torch.ones(256, 256)
        before = "the caller ran a torch matmul first (CPU dry run: no CUDA to initialise)"
    ranks = decorated(all_reduce_rank, mode).distributed(mode == "gpu")
    count = rank_count(mode)
    expected = count * (count + 1) / 2
    after = float((mine + 1).sum().item())  # the caller's own tensor still works after the call
    ok = [r["rank"] for r in ranks] == list(range(count)) and all(r["sum"] == expected for r in ranks)
    detail = f"{before}; {len(ranks)} ranks all_reduce -> {ranks[0]['sum']:g} (expected {expected:g})"
    return result("PASS" if ok and after > 0 else "FAIL", detail, ranks=len(ranks))


def check_seeds(mode: str) -> Dict[str, Any]:
    """Every rank of every call draws its generators afresh (CUDA's apart from the CPU one), as a new interpreter."""
    function = decorated(seeds_rank, mode)
    found = function.distributed(mode == "gpu") + function.distributed(mode == "gpu")
    kinds = ["cpu", "cuda"] if mode == "gpu" else ["cpu"]
    seeds = [ranks[kind] for ranks in found for kind in kinds]
    ok = len(set(seeds)) == len(seeds)
    detail = f"{len(found)} ranks over 2 calls, {len(set(seeds))} distinct seeds of {len(seeds)} ({', '.join(kinds)})"
    return result("PASS" if ok else "FAIL", detail, ranks=len(found))


def check_failing_rank(mode: str) -> Dict[str, Any]:
    from databricks.air.exceptions import DistributedExecutionError

    count = rank_count(mode)
    with tempfile.TemporaryDirectory(prefix="air-gpu-check-") as pid_dir:
        start = time.perf_counter()
        try:
            decorated(fail_on_last_rank, mode, timeout=120).distributed(mode == "gpu", pid_dir)
        except Exception as error:
            seconds = time.perf_counter() - start
            caught = error
        else:
            return result("FAIL", "the call returned although a rank raised")
        pids = recorded_pids(pid_dir)
    running, waited = leftovers(pids)
    problems = []
    if not isinstance(caught, ValueError) or not isinstance(caught, DistributedExecutionError):
        problems.append(f"raised {type(caught).__mro__[:3]} instead of a ValueError + DistributedExecutionError")
    if getattr(caught, "rank", None) != count - 1:
        problems.append(f"error names rank {getattr(caught, 'rank', None)}, expected {count - 1}")
    if len(pids) != count:
        problems.append(f"{len(pids)} of {count} ranks started")
    if running:
        problems.append(f"rank processes still running: {running}")
    detail = (
        f"{type(caught).__name__} (ValueError: {isinstance(caught, ValueError)}) from rank "
        f"{getattr(caught, 'rank', None)} of {count}, "
        f"raised after {seconds:.1f} s (other ranks blocked in all_reduce); {len(pids)} rank processes, "
        f"none left (gone {waited:.2f} s after the raise)"
    )
    return result(
        "FAIL" if problems else "PASS", "; ".join(problems) if problems else detail, seconds=round(seconds, 2)
    )


def check_timeout(mode: str) -> Dict[str, Any]:
    from databricks.air.exceptions import LocalExecutionTimeoutError

    # A first call starts the rank server (an interpreter importing torch), which the timeout would otherwise
    # include; the timed call is a later one, as in a notebook.
    decorated(all_reduce_rank, mode).distributed(mode == "gpu")
    with tempfile.TemporaryDirectory(prefix="air-gpu-check-") as pid_dir:
        start = time.perf_counter()
        try:
            decorated(sleep_on_device, mode, timeout=TIMEOUT_LIMIT).distributed(mode == "gpu", pid_dir, 120)
        except LocalExecutionTimeoutError:
            seconds = time.perf_counter() - start
        except Exception as error:
            return result("FAIL", f"raised {type(error).__name__} instead of LocalExecutionTimeoutError: {error}")
        else:
            return result("FAIL", "the call returned although it ran past its timeout")
        pids = recorded_pids(pid_dir)
    running, waited = leftovers(pids)
    problems = []
    if not TIMEOUT_LIMIT <= seconds <= TIMEOUT_LIMIT + TIMEOUT_SLACK:
        problems.append(f"raised after {seconds:.2f} s, expected {TIMEOUT_LIMIT}..{TIMEOUT_LIMIT + TIMEOUT_SLACK:g} s")
    if len(pids) != rank_count(mode):
        problems.append(f"{len(pids)} of {rank_count(mode)} ranks started before the timeout")
    if running:
        problems.append(f"rank processes still running: {running}")
    detail = (
        f"timeout={TIMEOUT_LIMIT}: LocalExecutionTimeoutError after {seconds:.2f} s "
        f"(+{seconds - TIMEOUT_LIMIT:.2f} s); {len(pids)} rank processes, none left (gone {waited:.2f} s after)"
    )
    return result(
        "FAIL" if problems else "PASS", "; ".join(problems) if problems else detail, seconds=round(seconds, 2)
    )


# The cold/warm launch subprocess: a fresh interpreter that imports databricks.air and calls the trivial function.
LAUNCH_SCRIPT = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import _gpu_checks as checks
from databricks.air import distributed
mode, warm_calls = sys.argv[2], int(sys.argv[3])
fn = checks.decorated(checks.all_reduce_rank, mode)
def timed():
    start = time.perf_counter()
    ranks = fn.distributed(mode == "gpu")
    seconds = time.perf_counter() - start
    count = len(ranks)
    if [r["sum"] for r in ranks] != [count * (count + 1) / 2] * count:
        raise SystemExit(f"wrong results: {ranks!r}")
    return seconds
cold = timed()
warm = [timed() for _ in range(warm_calls)]
print("LAUNCH " + json.dumps({"cold": cold, "warm": warm}))
"""

TORCHRUN_WORKER = r"""
import sys
sys.path.insert(0, sys.argv[1])
import _gpu_checks as checks
result = checks.all_reduce_rank(sys.argv[2] == "gpu")
count = int(__import__("os").environ["WORLD_SIZE"])
if result["sum"] != count * (count + 1) / 2:
    raise SystemExit(f"wrong result {result!r}")
"""


def _run_timed(argv: List[str], env: Dict[str, str]) -> tuple:
    start = time.perf_counter()
    done = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=240)
    seconds = time.perf_counter() - start
    sys.stdout.write(done.stdout)
    if done.returncode != 0:
        raise RuntimeError(f"{argv[:4]} exited with {done.returncode}; output is in the log")
    return seconds, done.stdout


def check_launch(mode: str) -> Dict[str, Any]:
    """Cold call (fresh process) and warm calls against torchrun of the same trivial function."""
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ)
    # With the caller importing this file (not running it), the rank function is pickled by reference: the ranks
    # import ``_gpu_checks`` as torchrun's workers do, so both sides run exactly the same code.
    env["PYTHONPATH"] = here + os.pathsep + env.get("PYTHONPATH", "")
    count = rank_count(mode)
    cold_calls, cold_walls, warm = [], [], []
    for index in range(LAUNCH_COLD_RUNS):
        wall, output = _run_timed(
            [sys.executable, "-c", LAUNCH_SCRIPT, here, mode, str(LAUNCH_WARM_CALLS if index == 0 else 0)], env
        )
        data = json.loads([line for line in output.splitlines() if line.startswith("LAUNCH ")][-1][7:])
        cold_calls.append(data["cold"])
        cold_walls.append(wall)
        warm.extend(data["warm"])
    with tempfile.TemporaryDirectory(prefix="air-gpu-check-") as scratch:
        worker = os.path.join(scratch, "torchrun_worker.py")
        with open(worker, "w") as stream:
            stream.write(TORCHRUN_WORKER)
        torchrun = []
        for _ in range(TORCHRUN_RUNS):
            argv = [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--standalone",
                f"--nproc-per-node={count}",
                worker,
                here,
                mode,
            ]
            torchrun.append(_run_timed(argv, env)[0])
    cold, cold_wall = statistics.median(cold_calls), statistics.median(cold_walls)
    warm_median, anchor = statistics.median(warm), statistics.median(torchrun)
    detail = (
        f"{count} ranks: cold call {cold:.2f} s (fresh process {cold_wall:.2f} s), warm call {warm_median:.2f} s, "
        f"torchrun {anchor:.2f} s; cold/torchrun {cold / anchor:.2f}, warm/torchrun {warm_median / anchor:.2f}"
    )
    return result(
        "PASS",
        detail,
        cold_call=round(cold, 3),
        cold_process=round(cold_wall, 3),
        warm_call=round(warm_median, 3),
        torchrun=round(anchor, 3),
        cold_over_torchrun=round(cold / anchor, 3),
        warm_over_torchrun=round(warm_median / anchor, 3),
        samples={"cold": cold_calls, "warm": warm, "torchrun": torchrun},
    )


def check_step_overhead(mode: str) -> Dict[str, Any]:
    """Runs bench/ddp_step_overhead.py: DDP steps per second under .distributed() against torchrun."""
    here = os.path.dirname(os.path.abspath(__file__))
    with tempfile.TemporaryDirectory(prefix="air-gpu-check-") as scratch:
        out = os.path.join(scratch, "overhead.json")
        # Fewer rounds rather than none when the check's cap (set by gpu_check.py) is short.
        cap = float(os.environ.get("GPU_CHECK_CAP_SECONDS", "0"))
        budget = max(1.0, cap - 20) if cap else 0.0
        argv = [
            sys.executable,
            os.path.join(here, "ddp_step_overhead.py"),
            f"--{mode}",
            "--json",
            out,
            "--max-seconds",
            str(budget),
        ]
        done = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=400)
        sys.stdout.write(done.stdout)
        if done.returncode != 0:
            return result("FAIL", f"ddp_step_overhead.py exited with {done.returncode}; see the log")
        with open(out) as stream:
            data = json.load(stream)
    ratio = data["ratio"]
    detail = (
        f"{data['ranks']} ranks, {data['steps']} DDP steps x {data['repeats']}: {data['ours']:.1f} steps/s under "
        f".distributed(), {data['torchrun']:.1f} under torchrun; ratio {ratio:.3f} (target >= 0.97); per CPU "
        f"second {data['cpu_ratio']:.3f}; spawn start method {data['spawn_ratio']:.3f}"
    )
    # A missed performance target is not a broken feature: MISS, which does not fail the run.
    return result("PASS" if ratio >= 0.97 else "MISS", detail, **data)


CHECKS: Dict[str, Callable[[str], Dict[str, Any]]] = {
    "machine": check_machine,
    "ddp": lambda mode: check_training("ddp", mode),
    "fsdp": lambda mode: check_training("fsdp", mode),
    "deepspeed": lambda mode: check_training("deepspeed", mode),
    "cuda_caller": check_cuda_caller,
    "seeds": check_seeds,
    "failing_rank": check_failing_rank,
    "timeout": check_timeout,
    "launch": check_launch,
    "step_overhead": check_step_overhead,
}


def main() -> None:
    name, mode, result_path = sys.argv[1], sys.argv[2], sys.argv[3]
    try:
        outcome = CHECKS[name](mode)
    except BaseException as error:
        traceback.print_exc()
        outcome = result("FAIL", f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"[:300])
    with open(result_path, "w") as stream:
        json.dump(outcome, stream, default=str)


if __name__ == "__main__":
    main()
