"""Reading a ``TorchDistributor(...)`` call: what ``@distributed`` it becomes, or why it cannot become one.

The constructor of ``pyspark.ml.torch.distributor.TorchDistributor`` is
``TorchDistributor(num_processes=1, local_mode=True, use_gpu=True)``; its arguments may be given by position, in
that order, or by keyword. (Its docstring says ``local_mode`` defaults to false; the code says ``True``, and the code
is what runs.) A configuration carries over only when every value is known exactly:

* ``num_processes``: an integer literal of 1 or more is ``num_accelerators=N``, and so is a name bound to one
  (``N = 2``, then ``num_processes=N``); ``torch.cuda.device_count()`` is the decorator's own default, every GPU of
  the node, and so is a name bound to it (``n = torch.cuda.device_count()``, then ``num_processes=n``). A name counts
  when every binding of it gives the same value, or when the binding is the statement just before the constructor
  (a notebook that counts the GPUs again in each cell); a module-level name is settled once every cell is known
  (:attr:`Reading.count_name`);
* ``local_mode``: ``True`` (or left out); ``False`` runs on the Spark cluster's workers, which ``@distributed`` (one
  node) does not do;
* ``use_gpu``: ``True`` (or left out) is GPU ranks; ``False`` is CPU ranks, ``accelerator_type="CPU"``.

``TorchDistributor.run`` has no time limit, while ``@distributed`` stops a call after 3 hours unless told otherwise,
so every decorator written says ``timeout=None``: the old behaviour, in plain sight.

Anything else (a name, an expression, ``*args``, ``**kwargs``, a keyword it does not know) is a problem, reported
with its own code, since guessing would run on a different number or kind of devices.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, List, Optional, Union

import libcst

from air_migrate.rules.torch_distributor.codes import CONFIG, LOCAL_MODE

PARAMETERS = ("num_processes", "local_mode", "use_gpu")
"""The constructor's parameters, in their positional order."""
ALL_GPUS = None
"""The count that means every GPU of the node (``num_processes=torch.cuda.device_count()``)."""
NO_TIME_LIMIT = "timeout=None"
"""What keeps ``TorchDistributor.run``'s lack of a time limit on the decorator."""


@dataclasses.dataclass(frozen=True)
class Config:
    """What a ``TorchDistributor`` runs on, in ``@distributed``'s terms."""

    count: Optional[int]
    """Ranks; :data:`ALL_GPUS` for every GPU of the node."""
    cpu: bool = False
    """``use_gpu=False``: CPU ranks."""

    def settings(self) -> str:
        """What the ranks run on, as the decorator's arguments: ``num_accelerators=2, accelerator_type="CPU"``."""
        arguments = [] if self.count is ALL_GPUS else [f"num_accelerators={self.count}"]
        if self.cpu:
            arguments.append('accelerator_type="CPU"')
        return ", ".join(arguments)

    def decorator_arguments(self) -> str:
        """The decorator's argument list: the settings, then ``timeout=None``."""
        return ", ".join(part for part in (self.settings(), NO_TIME_LIMIT) if part)


@dataclasses.dataclass(frozen=True)
class Problem:
    """Why a value cannot be carried over, reported at ``node`` with ``code``."""

    code: str
    message: str
    node: libcst.CSTNode


@dataclasses.dataclass(frozen=True)
class CountName:
    """``num_processes=n`` with ``n`` a module-level name: what it is bound to is known once every cell is."""

    name: str
    arg: libcst.Arg
    cpu: bool
    use_gpu: Optional[libcst.Arg] = None
    """The ``use_gpu=False`` argument, when ``cpu``."""


CountValue = Union[int, str, None]
"""What a name given as the count holds: an integer, :data:`NAME_ALL_GPUS` (``torch.cuda.device_count()``), or
``None`` (not known)."""


@dataclasses.dataclass(frozen=True)
class Reading:
    """A constructor call read: its configuration, or the problems that keep it from having one."""

    config: Optional[Config]
    problems: List[Problem]
    use_gpu: Optional[libcst.Arg] = None
    """The ``use_gpu`` argument when it is ``False`` (where the report says CPU ranks are an extension)."""
    count_name: Optional[CountName] = None
    """The count is a module-level name, to settle with :meth:`settled` (the configuration is ``None`` until then)."""

    def settled(self, value: "CountValue") -> "Reading":
        """The reading once what :attr:`count_name` holds where it is read is known (``None``: it is not)."""
        pending = self.count_name
        assert pending is not None
        problems: List[Problem] = []
        count = _named_count(value, pending.arg, pending.name, pending.cpu, problems)
        if problems:
            return Reading(None, problems)
        return Reading(Config(count, cpu=pending.cpu), [], pending.use_gpu if pending.cpu else None)


NAME_ALL_GPUS, NAME_AT_MODULE_LEVEL = "all_gpus", "module_level"
"""What a name given as the count can be found to be, where it is read (see :func:`read_constructor`)."""


def read_constructor(
    call: libcst.Call,
    is_device_count: Callable[[libcst.BaseExpression], bool],
    read_name: Callable[[libcst.Name], CountValue] = lambda name: None,
) -> Reading:
    """Read ``TorchDistributor(...)``; ``is_device_count`` tells ``torch.cuda.device_count()`` calls (by scope), and
    ``read_name`` what a name given as the count is: :data:`NAME_ALL_GPUS` (a local bound to that call), an integer
    (a local bound to that literal), :data:`NAME_AT_MODULE_LEVEL` (a module-level name, settled later), or ``None``
    (anything else)."""
    given, problems = _bind(call)
    local_mode = _boolean(given.get("local_mode"), True, "local_mode", problems)
    if local_mode is False:
        problems.append(
            Problem(
                LOCAL_MODE,
                "local_mode=False runs the ranks on the Spark cluster's workers, several nodes: @distributed runs "
                "on this node only; for several nodes use @distributed(remote=True, num_accelerators=N, "
                "accelerator_type=...) on a Ray cluster (see the scaling guide), or keep TorchDistributor",
                given["local_mode"],
            )
        )
    use_gpu = _boolean(given.get("use_gpu"), True, "use_gpu", problems)
    count_arg = given.get("num_processes")
    cpu_argument = next((arg for arg in call.args if given.get("use_gpu") is arg), None)
    named = count_arg is not None and isinstance(count_arg.value, libcst.Name)
    found = read_name(count_arg.value) if named else None  # type: ignore[union-attr]
    if found == NAME_AT_MODULE_LEVEL:
        if problems or use_gpu is None:
            return Reading(None, problems)
        return Reading(
            None,
            [],
            count_name=CountName(
                count_arg.value.value,  # type: ignore[union-attr]
                count_arg,  # type: ignore[arg-type]
                not use_gpu,
                cpu_argument,
            ),
        )
    if named:
        count = _named_count(found, count_arg, count_arg.value.value, use_gpu is False, problems)  # type: ignore
    else:
        count = _count(count_arg, is_device_count, use_gpu is False, problems)
    if problems or use_gpu is None:
        return Reading(None, problems)
    config = Config(count, cpu=not use_gpu)
    return Reading(config, [], cpu_argument if config.cpu else None)


def _named_count(value: CountValue, arg: libcst.Arg, name: str, cpu: bool, problems: List[Problem]) -> Union[int, None]:
    """The count a name holds: its integer, or :data:`ALL_GPUS` for ``torch.cuda.device_count()``."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value >= 1:
            return value
        problems.append(
            Problem(
                CONFIG,
                f"num_processes={name}, and {name} is {value}, not a number of ranks "
                "(TorchDistributor raises ValueError for it): write 1 or more",
                arg,
            )
        )
        return None
    if value == NAME_ALL_GPUS and not cpu:
        return ALL_GPUS
    problems.append(_device_count_for_cpu(arg) if value == NAME_ALL_GPUS else _not_a_literal(arg, name))
    return None


def _bind(call: libcst.Call) -> "tuple[dict, List[Problem]]":
    """The arguments by parameter name (each an :class:`libcst.Arg`), and what cannot be bound."""
    given = {}
    problems: List[Problem] = []
    position = 0
    for arg in call.args:
        if arg.star:
            problems.append(
                Problem(
                    CONFIG,
                    f"{arg.star}-arguments hide the distributor's settings, so they "
                    "cannot be carried over: write them out",
                    arg,
                )
            )
        elif arg.keyword is None:
            if position < len(PARAMETERS):
                given[PARAMETERS[position]] = arg
            else:
                problems.append(
                    Problem(
                        CONFIG,
                        "TorchDistributor takes three arguments by position (num_processes, "
                        "local_mode, use_gpu): this one is not carried over",
                        arg,
                    )
                )
            position += 1
        elif arg.keyword.value in PARAMETERS:
            given[arg.keyword.value] = arg
        else:
            problems.append(
                Problem(
                    CONFIG,
                    f"{arg.keyword.value}= has no counterpart on @distributed: remove it, "
                    "or migrate this distributor by hand",
                    arg,
                )
            )
    return given, problems


def _boolean(arg: Optional[libcst.Arg], default: bool, name: str, problems: List[Problem]) -> Optional[bool]:
    if arg is None:
        return default
    value = arg.value
    if isinstance(value, libcst.Name) and value.value in ("True", "False"):
        return value.value == "True"
    problems.append(
        Problem(
            CONFIG,
            f"{name}= is not True or False as written, so air-migrate cannot tell what it runs on: write True or False",
            arg,
        )
    )
    return None


def _count(
    arg: Optional[libcst.Arg],
    is_device_count: Callable[[libcst.BaseExpression], bool],
    cpu: bool,
    problems: List[Problem],
) -> Union[int, None]:
    if arg is None:
        return 1
    value = arg.value
    if isinstance(value, libcst.Integer):
        count = int(value.evaluated_value)
        if count >= 1:
            return count
        problems.append(
            Problem(
                CONFIG,
                f"num_processes={value.value} is not a number of ranks (TorchDistributor "
                "raises ValueError for it): write 1 or more",
                arg,
            )
        )
        return None
    if is_device_count(value) and not cpu:
        return ALL_GPUS
    if is_device_count(value):
        problems.append(_device_count_for_cpu(arg))
        return None
    problems.append(_not_a_literal(arg, value.value if isinstance(value, libcst.Name) else None))
    return None


def _device_count_for_cpu(arg: libcst.Arg) -> Problem:
    return Problem(
        CONFIG,
        "num_processes=torch.cuda.device_count() with use_gpu=False counts GPUs for CPU ranks: "
        "write the number of CPU ranks",
        arg,
    )


def _not_a_literal(arg: libcst.Arg, name: Optional[str]) -> Problem:
    what = (
        f"num_processes={name}, and {name} is not bound to an integer literal or to torch.cuda.device_count() "
        "(nor to the same one wherever it is bound)"
        if name
        else "num_processes is not an integer literal"
    )
    return Problem(
        CONFIG,
        f"{what}, so air-migrate cannot carry it over to @distributed(num_accelerators=...): "
        "write the number, or migrate by hand",
        arg,
    )


def script_problem(shown: str, bound: bool = False) -> str:
    """What to do about ``run(<a script's path>, ...)``: the torchrun form has no decorator form (``AM206``);
    ``bound``: ``shown`` is a name bound to the path."""
    what = f"runs the script {shown} holds (a path)" if bound else "runs a script"
    return (
        f"run({shown}, ...) {what} with torchrun, which has no decorator form: move its training code into a "
        "function, decorate it with @distributed(...) and call fn.distributed(...) (or keep TorchDistributor for "
        "it)"
    )
