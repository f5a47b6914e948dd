"""Rewrite a page's output blocks from a real run: ``.venv/bin/python tests/docs_update.py docs/PAGE.md [...]``.

Runs each page as ``tests/test_docs.py`` does, and replaces every ```` ```text ```` block that does not match the
output of the block before it (``tests/docs_output.py``) with what that block printed, the run's folders written as
a reader's would be: the page's working directory as ``/home/me/project``, the log folder as
``/tmp/databricks-air-logs``, ``air``'s home as ``/home/me/.air`` (what ``~/.air`` is when printed). Review the
result with ``git diff``: a block whose output varies between runs needs ``...`` or a ``<!-- not-checked: reason -->``
marker instead.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import test_docs
from docs_blocks import read_page
from docs_output import block_outputs, mismatch


def update(page: Path) -> int:
    """Rewrite the page's stale output blocks; the number rewritten."""
    parsed = read_page(page)
    scratch = Path(tempfile.mkdtemp(prefix="air-docs-update-"))
    ray_directory = tempfile.mkdtemp(prefix="air-docs-ray-")
    try:
        (scratch / "work").mkdir()
        spec = {
            "page": test_docs._page_id(page),
            "blocks": [
                {"number": b.number, "line": b.line, "language": b.language, "code": b.code}
                for b in parsed.executed_blocks
            ],
        }
        (scratch / "blocks.json").write_text(json.dumps(spec))
        done = subprocess.run(
            [sys.executable, str(test_docs.RUNNER), str(scratch / "blocks.json")],
            cwd=scratch / "work",
            env=test_docs._clean_environment(scratch, ray_directory),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=test_docs.PAGE_TIMEOUT,
        )
        if done.returncode != 0:
            raise SystemExit(f"{page}: a block failed\n\n{done.stdout[-6000:]}")
        outputs = block_outputs(done.stdout)
        readers = [
            (str(scratch / "work"), "/home/me/project"),
            (str(scratch / "databricks-air-logs"), "/tmp/databricks-air-logs"),
            (str(scratch / "air-home"), "/home/me/.air"),
        ]
        text = page.read_text(encoding="utf-8")
        rewritten = 0
        for block in parsed.blocks:
            source = block.checked_output_of
            if source is None or mismatch(block.code, outputs.get(source, "")) is None:
                continue
            shown = outputs[source]
            for path, reader in readers:
                shown = shown.replace(path, reader)
            old = f"```text\n{block.code}```"
            if old not in text:
                print(f"{page}: block {block.number} (line {block.line}) is indented or nested: rewrite it by hand")
                continue
            text = text.replace(old, f"```text\n{shown.rstrip()}\n```", 1)
            rewritten += 1
        page.write_text(text, encoding="utf-8")
        return rewritten
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        shutil.rmtree(ray_directory, ignore_errors=True)


if __name__ == "__main__":
    for name in sys.argv[1:]:
        print(f"{name}: {update(Path(name).resolve())} block(s) rewritten")
