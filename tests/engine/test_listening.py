"""Every socket a local call listens on is on loopback unless the user names another address (``MASTER_ADDR``).

Listening addresses are read with psutil; nothing here connects to an address other than 127.0.0.1.
"""

from __future__ import annotations

from typing import List, Tuple

import pytest

from databricks.air import distributed
from databricks.air._engine.processes import listen
from databricks.air.exceptions import RuntimeConfigurationError


@distributed(accelerator_type="CPU", num_accelerators=2)
def _listeners_during_a_call() -> List[Tuple[str, int, str]]:
    """Every TCP listener of the rank server's children (the ranks, the rendezvous store), after gloo is up."""
    import os

    import psutil
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    dist.all_reduce(torch.ones(1))
    found = []
    if dist.get_rank() == 0:
        family = {child.pid: child.name() for child in psutil.Process(os.getppid()).children(recursive=True)}
        store_port = int(os.environ["MASTER_PORT"])
        found = [
            (connection.laddr.ip, connection.laddr.port, "store" if connection.laddr.port == store_port else "rank")
            for connection in psutil.net_connections("inet")
            if connection.status == psutil.CONN_LISTEN and connection.pid in family
        ]
    dist.barrier()
    dist.destroy_process_group()
    return found


def test_the_rendezvous_store_and_the_ranks_listen_on_loopback_only() -> None:
    listeners = _listeners_during_a_call.distributed()[0]
    assert any(kind == "store" for _, _, kind in listeners), listeners
    assert {address for address, _, _ in listeners} == {"127.0.0.1"}, listeners


def test_a_master_addr_that_is_no_address_of_this_machine_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MASTER_ADDR", "192.0.2.77")  # TEST-NET-1: never an address of this machine; nothing is sent
    with pytest.raises(RuntimeConfigurationError, match=r"MASTER_ADDR=192\.0\.2\.77 .* cannot listen there"):
        _listeners_during_a_call.distributed()


def test_listen_binds_the_address_asked_for_only() -> None:
    for host in ("127.0.0.1", "localhost"):
        with listen(host) as server:
            address = server.getsockname()[0]
            assert address in ("127.0.0.1", "::1") and server.getsockname()[1] > 0
    with pytest.raises(OSError, match="cannot listen on 192.0.2.77:0: Cannot assign requested address"):
        listen("192.0.2.77")
    with (
        listen("127.0.0.1") as taken,
        pytest.raises(OSError, match="cannot listen on 127.0.0.1:.*: Address already in use"),
    ):
        listen("127.0.0.1", taken.getsockname()[1])
