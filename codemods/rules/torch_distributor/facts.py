"""What the ``TorchDistributor`` rewrite knows of a whole file: facts gathered cell by cell, before any decision.

The rewrite spans cells (a notebook builds its distributor in one cell, runs it in another and defines the function
in a third), so every cell is surveyed first (:mod:`~air_migrate.rules.torch_distributor.survey`) into one
:class:`FileFacts`, and only then does the planner decide (:mod:`~air_migrate.rules.torch_distributor.plan`). Facts
hold the original libcst nodes of their cells, so the rule running over a cell later finds its edits by node.

Module-level names are shared by every cell of a notebook, so they are keyed by name alone (:class:`Var` without a
scope); a function's local variable is keyed by its scope as well. Positions (:data:`Where`) are ``(cell, line,
column)``, 1-based, which orders them as a notebook runs them.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Sequence, Tuple, Union

import libcst

from air_migrate.rule_base import Severity
from air_migrate.rules.torch_distributor.config import NAME_ALL_GPUS as ALL_GPUS_NAME, Reading

Where = Tuple[int, int, int]
"""``(cell, line in the cell, column)``, all 1-based: the order in which a notebook runs its statements."""

TORCH_DISTRIBUTOR = "pyspark.ml.torch.distributor.TorchDistributor"
DEEPSPEED_DISTRIBUTOR = "pyspark.ml.deepspeed.deepspeed_distributor.DeepspeedTorchDistributor"
DEVICE_COUNT = "torch.cuda.device_count"
LAUNCHERS = frozenset({"databricks.air.distributed", "serverless_gpu.distributed"})
"""What an existing ``distributed`` name may be bound to and still be reused for the decorator."""
LAUNCHER_MODULES = frozenset({"databricks.air", "serverless_gpu"})
RUN = "run"
TRAIN_ON_DATAFRAME = "_train_on_dataframe"

IMPORT, DEF, CLASS, OTHER = "import", "def", "class", "other"
"""The kinds of :class:`Binding`."""


@dataclasses.dataclass(frozen=True)
class Var:
    """A variable: a module-level name (``scope`` is ``None``: one per file, shared by its cells), or a local."""

    name: str
    scope: Optional[object] = None


@dataclasses.dataclass(frozen=True)
class Target:
    """The first argument of a ``run(...)`` call: a module-level name to look up, or why it cannot be one."""

    node: libcst.CSTNode
    var: Optional[Var] = None
    code: Optional[str] = None
    problem: Optional[str] = None


@dataclasses.dataclass(eq=False)
class MethodCall:
    """``receiver.run(...)`` or ``receiver._train_on_dataframe(...)``, on a variable or on a constructor call."""

    call: libcst.Call
    method: str
    value_used: bool
    """The call is part of an expression or an assignment, not a statement of its own."""
    target: Optional[Target] = None
    """For ``run``: what it runs."""


@dataclasses.dataclass(eq=False)
class Construction:
    """A ``TorchDistributor(...)`` call and what becomes of the object it builds."""

    call: libcst.Call
    reading: Reading
    holder: Optional[Var] = None
    """``d = TorchDistributor(...)``: the variable."""
    assign: Optional[libcst.Assign] = None
    """The assignment, alone on its line or not: what is removed with the variable."""
    statement: Optional[libcst.SimpleStatementLine] = None
    """The line of the assignment (whose trailing comment goes with it when the assignment is all it holds)."""
    method: Optional[MethodCall] = None
    """``TorchDistributor(...).run(...)``: the call made on it directly."""
    where: Where = (0, 0, 0)
    deferred: bool = False
    """Inside a function or lambda: its count is read when that is called, not where it is written."""


@dataclasses.dataclass(eq=False)
class Binding:
    """Something that binds a variable: an import, a def, a class, an assignment..."""

    var: Var
    where: Where
    node: libcst.CSTNode
    kind: str
    imported: Optional[str] = None
    """For an import: the dotted name it imports (``pyspark.ml.torch.distributor.TorchDistributor``)."""
    alias: Optional[libcst.ImportAlias] = None
    guarded: bool = False
    """Under a module-level ``try`` or ``if``: it may not have run."""
    construction: Optional[Construction] = None
    """``name = TorchDistributor(...)``."""
    device_count: bool = False
    """``name = torch.cuda.device_count()`` (or annotated): a count that means every GPU of the node."""
    straight: bool = False
    """A statement of its scope's own block (not under an ``if``, a loop, a ``try``...): it runs, in file order,
    whenever the code around it does. Only those let a variable bound several times be followed."""
    literal: Optional[int] = None
    """``name = 2`` (or annotated): an integer literal, which a count held in the name carries."""
    string: bool = False
    """``name = "train.py"`` (or annotated): a string, which ``run`` takes as a script's path."""
    next_span: Optional[Tuple[Where, Where]] = None
    """For a plain assignment of a distributor or a count: from the end of the assignment to the end of the next
    statement of its block. Whatever in it reads the name reads this binding, when no other binding of the name lies
    in it: each block of a notebook may bind the same name and use it at once."""

    @property
    def count(self) -> Union[int, str, None]:
        """What a count held in this name is (see :data:`~air_migrate.rules.torch_distributor.config.CountValue`)."""
        return ALL_GPUS_NAME if self.device_count else self.literal

    def just_before(self, where: Where) -> bool:
        """``where`` lies in :attr:`next_span`."""
        return self.next_span is not None and self.next_span[0] <= where <= self.next_span[1]


@dataclasses.dataclass(eq=False)
class Use:
    """A read of a variable, and what it is part of."""

    var: Var
    node: libcst.CSTNode
    where: Where = (0, 0, 0)
    deferred: bool = False
    """Inside a function (or lambda) of the variable's scope: it runs when that is called, not where it is
    written, so which of several bindings it reads cannot be told from the text."""
    method: Optional[MethodCall] = None
    """The variable is the receiver of this call."""
    target_of: Optional[libcst.Call] = None
    """The variable is the first argument of this ``.run(...)`` call."""
    construction: Optional[Construction] = None
    """The read is part of the class this constructor call names (``td`` in ``td.TorchDistributor(2)``)."""
    called: bool = False
    """The variable is called: ``name(...)``."""


@dataclasses.dataclass(frozen=True)
class Reference:
    """A use of ``TorchDistributor`` (or its DeepSpeed sibling) that is reported as it is, with ``code``."""

    node: libcst.CSTNode
    code: str
    message: str
    severity: Severity = Severity.BLOCKING
    """``info`` for a note, nothing to do (a class that subclasses ``TorchDistributor`` defines, it does not use)."""


@dataclasses.dataclass
class FileFacts:
    """Everything the survey found in a file, in cell order."""

    bindings: Dict[Var, List[Binding]] = dataclasses.field(default_factory=dict)
    uses: Dict[Var, List[Use]] = dataclasses.field(default_factory=dict)
    constructions: List[Construction] = dataclasses.field(default_factory=list)
    method_calls: Dict[libcst.Call, MethodCall] = dataclasses.field(default_factory=dict)
    references: List[Reference] = dataclasses.field(default_factory=list)
    restarts: Sequence[Where] = ()
    """Where the Python process restarts (``%pip``, ``restartPython()``): names bound before are gone after."""
    unparsed: Sequence[str] = ()
    """Code no rule parses that may read the file's names (masked magics, Python cells that did not parse)."""

    def bind(self, binding: Binding) -> None:
        self.bindings.setdefault(binding.var, []).append(binding)

    def use(self, use: Use) -> None:
        self.uses.setdefault(use.var, []).append(use)
