"""air-migrate's reading of scripts, Databricks notebook sources and Jupyter notebooks: cells out, bytes back."""

from __future__ import annotations

import json

import libcst
import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from air_migrate.sources import DatabricksFile, NotebookFile, PythonFile, SourceError, mask_cell, read_source


@pytest.mark.parametrize(
    "data",
    [
        b"import os\nx = 1\n",
        b"import os\r\nx = 1\r\n",
        b"\xef\xbb\xbfimport os\n",
        b"if x:\n\tpass\n",
        b"x = 1  # comment   \nno_final_newline = 2",
        b"",
    ],
    ids=["lf", "crlf", "bom", "tabs", "no-final-newline", "empty"],
)
def test_a_plain_script_is_one_cell_and_comes_back_byte_for_byte(data: bytes) -> None:
    source = read_source("script.py", data)
    assert isinstance(source, PythonFile) and len(source.cells) == 1
    assert source.render({}) == data
    assert source.render({1: source.cells[0].text}) == data


def test_a_scripts_new_text_keeps_its_bom() -> None:
    source = read_source("s.py", b"\xef\xbb\xbfa = 1\r\n")
    assert source.render({1: "b = 2\r\n"}) == b"\xef\xbb\xbfb = 2\r\n"


DATABRICKS = (
    "# Databricks notebook source\n"
    "# MAGIC %pip install serverless_gpu\n"
    "\n"
    "# COMMAND ----------\n"
    "\n"
    "# DBTITLE 1,Imports\n"
    "from serverless_gpu import distributed\n"
    "\n"
    "# COMMAND ----------\n"
    "# MAGIC %md\n"
    "# MAGIC # Title\n"
    "# MAGIC\n"
    "# COMMAND ----------\n"
    "\n"
    "print(1)"
)


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
@pytest.mark.parametrize("bom", [False, True])
def test_a_databricks_source_splits_into_cells_and_comes_back(newline: str, bom: bool) -> None:
    data = (("\ufeff" if bom else "") + DATABRICKS.replace("\n", newline)).encode()
    source = read_source("nb.py", data)
    assert isinstance(source, DatabricksFile)
    assert [c.text is not None for c in source.cells] == [False, True, False, True]
    assert [c.first_line for c in source.cells] == [2, 5, 10, 14]
    assert source.cells[1].text == newline.join(
        ["", "# DBTITLE 1,Imports", "from serverless_gpu import distributed", "", ""]
    )
    assert source.render({}) == data


def test_only_the_changed_databricks_cell_changes() -> None:
    source = read_source("nb.py", DATABRICKS.encode())
    new = source.cells[1].text.replace("serverless_gpu", "databricks.air")
    assert source.render({2: new}).decode() == DATABRICKS.replace(
        "from serverless_gpu import", "from databricks.air import"
    )


def test_a_py_file_is_a_databricks_notebook_only_with_the_header_first() -> None:
    assert isinstance(read_source("x.py", b"x = 1\n# Databricks notebook source\n"), PythonFile)


def _notebook(**metadata: object) -> nbformat.NotebookNode:
    nb = new_notebook(
        cells=[
            new_markdown_cell("# Title"),
            new_code_cell("%pip install serverless_gpu\nfrom serverless_gpu import distributed\n"),
            new_code_cell("x = 1\nprint('é')"),
        ],
        metadata=metadata,
    )
    nb.cells[2].outputs = [nbformat.v4.new_output("stream", name="stdout", text="é\n")]
    nb.cells[2].execution_count = 3
    return nb


@pytest.mark.parametrize(
    "dump",
    [
        lambda nb: nbformat.writes(nb) + "\n",  # nbformat's own style: indent 1, sorted keys
        lambda nb: json.dumps(nb, indent=2, ensure_ascii=True),  # indent 2, escaped, no final newline
        lambda nb: json.dumps(nb),  # one line
    ],
    ids=["nbformat", "indent-2-ascii", "one-line"],
)
def test_a_notebook_comes_back_byte_for_byte_in_its_own_json_style(dump) -> None:
    data = dump(_notebook()).encode()
    source = read_source("nb.ipynb", data)
    assert isinstance(source, NotebookFile)
    assert [c.text is not None for c in source.cells] == [False, True, True]
    assert source.render({}) == data


def test_only_the_source_of_the_changed_notebook_cell_changes() -> None:
    nb = _notebook()
    nb.cells[1].source = ["%pip install serverless_gpu\n", "from serverless_gpu import distributed\n"]  # a list
    data = (nbformat.writes(nb) + "\n").encode()
    source = read_source("nb.ipynb", data)
    masked = source.cells[1].text
    assert "%pip" not in masked  # masked for libcst
    new_text = source.cells[1].unmask(masked.replace("serverless_gpu import", "databricks.air import"))
    out = json.loads(source.render({2: new_text}))
    before = json.loads(data)
    assert out["cells"][1]["source"] == ["%pip install serverless_gpu\n", "from databricks.air import distributed\n"]
    for key in ("metadata", "nbformat", "nbformat_minor"):
        assert out[key] == before[key]
    assert out["cells"][0] == before["cells"][0] and out["cells"][2] == before["cells"][2]


def test_cells_of_a_notebook_in_another_language_are_not_offered() -> None:
    data = json.dumps(_notebook(kernelspec={"language": "R", "name": "ir", "display_name": "R"}), indent=1).encode()
    assert all(cell.text is None for cell in read_source("nb.ipynb", data).cells)


@pytest.mark.parametrize(
    "cell",
    [
        "%pip install serverless_gpu\nimport os\n",
        "!ls -la\nfiles = !ls\nx = %env HOME\n",
        "if True:\n    %time f()\n    !echo hi\n",
        "%%time\nfrom serverless_gpu import distributed\n",
        "%%capture out\nprint(1)",
        "import os  # 100% sure\nprint('%s' % os.sep)\n",
    ],
)
def test_magics_are_masked_with_valid_python_and_restored_exactly(cell: str) -> None:
    masked = mask_cell(1, cell)
    assert masked.text is not None and masked.skip_reason is None
    libcst.parse_module(masked.text)  # parses
    assert masked.unmask(masked.text) == cell
    if "=" in cell and "!ls" in cell:
        assert "files = __air_magic_" in masked.text  # the assignment stays visible to analysis


@pytest.mark.parametrize(
    "cell, reason",
    [
        ("%%bash\necho serverless_gpu\n", "the cell magic %%bash does not hold Python"),
        ("%%sql\nselect 1\n", "the cell magic %%sql does not hold Python"),
        ("%pip install \\\n  serverless_gpu\n", "a magic continues over several lines"),
    ],
)
def test_cells_that_cannot_be_masked_are_skipped_with_a_reason(cell: str, reason: str) -> None:
    masked = mask_cell(4, cell)
    assert masked.text is None and masked.skip_reason == reason and masked.number == 4


def test_placeholders_never_collide_with_the_cells_own_text() -> None:
    cell = "__air_magic_0__ = 1\n%pip install x\n"
    masked = mask_cell(1, cell)
    assert "__air_magic_1__" in masked.text and masked.unmask(masked.text) == cell


@pytest.mark.parametrize(
    "path, data, message",
    [
        ("x.py", b"caf\xe9 = 1\n", "not UTF-8"),
        ("x.ipynb", b"{not json", "invalid JSON at line 1"),
        ("x.ipynb", b"[1, 2]", "no list of cells"),
        ("x.ipynb", b'{\n\t"cells": []\n}\n', "cannot be reproduced exactly"),
    ],
)
def test_what_cannot_be_read_exactly_is_an_error_not_a_rewrite(path: str, data: bytes, message: str) -> None:
    with pytest.raises(SourceError, match=message):
        read_source(path, data)


@pytest.mark.parametrize(
    "line, magic",
    [
        ("%pip install serverless_gpu torch", "%pip install serverless_gpu torch"),
        ("files = !ls -la /some/long/directory", "!ls -la /some/long/directory"),
        ("%%time  # measured over the whole cell", "%%time  # measured over the whole cell"),
    ],
)
def test_a_long_enough_magic_is_masked_by_a_placeholder_of_its_own_length(line: str, magic: str) -> None:
    masked = mask_cell(1, line + "\nx = 1\n")
    (placeholder,) = masked.masks
    assert masked.masks[placeholder] == magic and len(placeholder) == len(magic)
    assert masked.text.splitlines()[0] == line.replace(magic, placeholder)


def test_cells_say_whether_they_hold_code() -> None:
    databricks = read_source("nb.py", DATABRICKS.encode())
    assert [cell.code for cell in databricks.cells] == [True, True, False, True]  # %md is documentation
    notebook = read_source("nb.ipynb", (nbformat.writes(_notebook()) + "\n").encode())
    assert [cell.code for cell in notebook.cells] == [False, True, True]
