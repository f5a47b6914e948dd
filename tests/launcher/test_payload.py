"""Shipping function and arguments: what cannot be pickled is named before any rank starts.

(The pool's rank server may start meanwhile: it imports torch while the call pickles, and the next call uses it.)"""

from __future__ import annotations

import sys
import threading
import warnings

import psutil
import pytest

from databricks.air import distributed
from databricks.air._engine import rank_server_handle
from databricks.air.exceptions import SerializationError

cpu2 = distributed(num_accelerators=2, accelerator_type="CPU", timeout=120)

lock = threading.Lock()
BIG = b"x" * (101 * 1000 * 1000)


def uses_lock() -> bool:
    return lock.locked()


def helper() -> bool:
    return lock.locked()


def uses_helper() -> bool:
    return helper()


def uses_big() -> int:
    return len(BIG)


def _children() -> set:
    """This process's descendants, but for the pool's warm rank servers themselves (not what they fork: the ranks)."""
    servers = {handle.process.pid for handle in list(rank_server_handle._live_handles)}
    return {p.pid for p in psutil.Process().children(recursive=True)} - servers


@pytest.fixture
def by_value() -> None:
    """Make this module's functions travel by value, as notebook code does (importable ones go by reference)."""
    import cloudpickle

    module = sys.modules[__name__]
    cloudpickle.register_pickle_by_value(module)
    yield
    cloudpickle.unregister_pickle_by_value(module)


@pytest.mark.usefixtures("by_value")
def test_an_unpicklable_global_is_named_before_anything_starts() -> None:
    before = _children()
    with pytest.raises(SerializationError, match=r"function 'uses_lock'.*global 'lock', a _thread.lock"):
        cpu2(uses_lock).distributed()
    assert _children() <= before


@pytest.mark.usefixtures("by_value")
def test_the_culprit_is_found_through_a_helper_function() -> None:
    with pytest.raises(SerializationError, match=r"global 'lock' \(through global 'helper'\)"):
        cpu2(uses_helper).distributed()


def test_an_unpicklable_closure_variable_is_named() -> None:
    handle = threading.Lock()

    def closure() -> bool:
        return handle.locked()

    with pytest.raises(SerializationError, match=r"closure variable 'handle', a _thread.lock"):
        cpu2(closure).distributed()


def test_an_unpicklable_argument_is_named() -> None:
    def takes(handle: object, n: int = 1) -> int:
        return n

    with pytest.raises(SerializationError, match=r"argument 'handle' \(a _thread.RLock\) cannot be pickled"):
        cpu2(takes).distributed(threading.RLock())


@pytest.mark.usefixtures("by_value")
def test_a_large_captured_global_gets_a_warning_naming_it() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cpu2(uses_big).distributed() == [len(BIG)] * 2
    messages = [w for w in caught if "global 'BIG' (101 MB)" in str(w.message)]
    assert len(messages) == 1
    assert "Load large data inside the function" in str(messages[0].message)
    assert messages[0].filename == __file__  # attributed to the caller's line


def test_a_notebook_function_using_torch_and_another_ops_attribute_ships(run_script) -> None:
    # cloudpickle alone fails here: it takes `ops` for the submodule `torch.ops`, an object it cannot pickle.
    result = run_script(
        """
        import types
        import cloudpickle
        import torch
        from databricks.air._payload import serialize_function

        tools = types.SimpleNamespace(ops=types.SimpleNamespace(scale=3.0))

        def train():
            return float(torch.ones(1).sum()) * tools.ops.scale, torch.ops is not None

        try:
            cloudpickle.dumps(train)
            print("cloudpickle alone: ok")
        except TypeError as error:
            print("cloudpickle alone:", error)
        print("shipped:", cloudpickle.loads(serialize_function(train))())
        """
    )
    assert result.returncode == 0, result.stderr
    assert "cloudpickle alone: cannot pickle '_Ops' object" in result.stdout  # the bug this guards against is real
    assert "shipped: (3.0, True)" in result.stdout
