"""``air-migrate``: rewrite ``serverless_gpu`` and ``TorchDistributor`` code to ``@distributed``.

How a file travels through ``air-migrate``, module by module, top to bottom:

* ``cli``: the command; puts the parts below together, prints the summary and picks the exit code;
* ``arguments``: the options, their help, and the combinations refused as usage errors;
* ``codes``: every report code with its line for ``--list-rules``; ``--select``/``--ignore`` pick rules by code;
* ``rules``: the rules, each registering itself by code (``rules/torch_distributor/`` for AM201 to AM217);
* ``discovery``: which files a run looks at (paths, directories, ``--exclude``);
* ``runner``: each file read and handed to the engine, one by one or in processes (``-j``), results in order;
* ``engine``: one file: its cells, the line rules, the parse, the survey, one pass of the rules, the checks;
* ``sources``: a script, a Databricks notebook source or a Jupyter notebook split into cells, and put back;
* ``cell_context``: what a cell inherits from the cells before it (imports), and the words worth parsing for;
* ``syntax_errors``: why a cell does not parse, in Python's words, and whether it is a bare shell line;
* ``cell_pass``: the selected rules over one cell in one traversal, positions those of the input;
* ``rule_base``: the contract between the driver and the rules (``Rule``, ``LineRule``, findings, registry);
* ``todo_markers``: the ``# TODO(air-migrate AMxxx)`` comments above what needs a person;
* ``results``: what migrating a file gives: its records and its new bytes;
* ``modes``: what is done with each result: write, diff, check, copy to ``--out-dir``, standard output;
* ``writing``: atomic writes in place and the ``--out-dir`` tree;
* ``diffing``: unified diffs of scripts and of notebook cells;
* ``report``: report lines, the ``--report`` file (text or JSON) and the summary line;
* ``progress``: the progress bar on a terminal;
* ``colors``: colours for a terminal, or none.
"""
