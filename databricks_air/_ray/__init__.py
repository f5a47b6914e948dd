"""Ray: the machinery behind ``remote=True``, ``ray_init`` and ``ray_launch``, and the one Ray layer that the
workload command's Ray backend uses too.

Ray is optional (the ``ray`` extra: ``pip install ".[ray]"`` in a checkout); nothing here is imported until a Ray
feature is used.
The layer: the cluster connection (:mod:`.session`, :mod:`.require`), what a unit of work reserves and what the
cluster has (:mod:`.resources`), placement groups with a strategy and one actor per bundle (:mod:`.placement`), the
polls that bring the hosts' news and find lost hosts (:mod:`.host_polls`), and what of the caller's environment
travels (:mod:`.forwarded_environ`).
A call travels: :mod:`.ray_call` (the Ray implementation of the engine's ``Call``) connects through :mod:`.session`,
turns the decorator's settings into one placement-group bundle per rank (:mod:`.request`), reserves the bundles
(:mod:`.placement`), starts one :class:`.rank_host.RankHost` actor per bundle, gives each rank its torchrun
environment (:mod:`.rank_layout`), streams output back and collects results exactly as the local call does.
:mod:`.rank_cluster` is the other direction, for ``ray_launch``: a Ray cluster started over the ranks of a call.
"""
