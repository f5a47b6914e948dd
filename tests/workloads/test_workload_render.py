"""How ``air get`` draws its boxes."""

from __future__ import annotations

from databricks.air.workloads.render import box


def test_every_line_of_a_box_is_as_wide_as_the_others() -> None:
    for title, lines in (("Configuration", ["experiment_name: first-workload", "x"]), ("A long title here", ["ab"])):
        drawn = box(title, lines).splitlines()
        assert len({len(line) for line in drawn}) == 1, drawn
        assert drawn[0].startswith(f"╭─ {title} ") and drawn[0].endswith("╮") and drawn[-1].startswith("╰")
