"""The policy registry as the analysis sees it: the policies (``headroom.policies``, the one lookup
implementation, and ``headroom.policies.fit``, their fitting), and which of them the decision may
select from in each mode.

``make(name)`` returns an unfitted policy; ``policy.fit(train)`` returns it fitted on a ``Train``
(trace rows of the train invocations, in order, and their invocation x candidate latency matrix);
``policy.choose(features)`` gives the chosen column for every row of a trace slice (what ``evaluate``
scores) and ``policy.lookup(shape)`` the candidate id for one shape (what a serving system runs, what
the lifecycle stage times). Keyed policies take the best candidate per key on train (least summed
latency plus per-call charge; a tie keeps the global candidate, so ties never cause a switch) and send
keys unseen in train to the global candidate. ``oracle`` needs the future: it is not in the registry;
``evaluate`` picks it per invocation. A family's config table is scored as one more policy
(``config-table``: ``policies_of``, ``keyed_of``), its choices fixed; it is never selected.
"""

from __future__ import annotations

import headroom.policies as _policies
from headroom.decide import words as _words
from headroom.policies import *  # noqa: F403  (the policies' names, listed once: headroom.policies.__all__)
from headroom.policies.fit import Train, fit_keyed, fit_objective, global_column, key_codes, regret_of
from headroom.policies.shapes import Keying

__all__ = [
    "DEPLOYABLE",
    "GRAPH_DEPLOYABLE",
    "KEYED",
    "POLICIES",
    "RICHER",
    "Train",
    "deployable_in",
    "fit_keyed",
    "fit_objective",
    "global_column",
    "key_codes",
    "keyed_of",
    "needs",
    "policies_of",
    "regret_of",
]
__all__ += _policies.__all__

POLICIES = (*_policies.REGISTRY, "oracle")
KEYED = tuple(p for p in _policies.REGISTRY if p != "random")  # fitted per key through ``fit_keyed``


def policies_of(keying: Keying) -> tuple[str, ...]:
    """The policies a study of ``keying``'s family scores: ``POLICIES``, then its config table's."""
    return (*POLICIES, *_policies.table_policies(keying))


def keyed_of(keying: Keying) -> tuple[str, ...]:
    """The keyed policies a study of ``keying``'s family fits: ``KEYED``, then its config table's."""
    return (*KEYED, *_policies.table_policies(keying))


# Policies a serving system could ship that adapt to shape beyond the category split; the better of
# `global` and category-keyed is the baseline they must beat, `random` a floor, `oracle` needs the future.
DEPLOYABLE = ("exact-key", "bucketed", "clustered", "regret-aware", "batch-keyed")
# Under full CUDA Graph replay the features a graph does not fix at capture (attention: the context
# length) change inside a replay: only policies keyed on what is fixed at capture (the category and
# the padded capture-fixed features) can be baked into the graphs. The others would need a runtime
# dispatch inside the graph; graph mode reports them and decides on these.
GRAPH_DEPLOYABLE = ("batch-keyed",)


# Richer policy families, each scored beside the decided figure so that a gap no deployable policy
# captures is stated with what would capture it: exact-key keys on the whole shape, bucketed on
# powers of two of its numeric features.
RICHER = ("exact-key", "bucketed")


def needs(policy: str, mode: str, words: _words.Words | None = None) -> str:
    """What deploying ``policy`` in ``mode`` takes, in a server's words (``words``: the study's
    family's, headroom.decide.words; None: the built-in family's)."""
    words = words or _words.of()
    if mode == "graph" and policy not in GRAPH_DEPLOYABLE:
        return words.runtime_dispatch
    if mode == "graph":
        return words.captured
    return "a table lookup before each call"


def deployable_in(mode: str) -> tuple[str, ...]:
    """The policies the decision selects from in ``mode``."""
    return GRAPH_DEPLOYABLE if mode == "graph" else DEPLOYABLE
