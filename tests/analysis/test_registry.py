"""The analysis's registry: the policies' names re-exported from their one list, and what the decision
may select from in each mode."""

import headroom.policies as policies
from headroom.decide import registry


def test_every_policy_name_is_re_exported_from_headroom_policies_one_list():
    own = {"DEPLOYABLE", "GRAPH_DEPLOYABLE", "POLICIES", "deployable_in"}
    assert set(policies.__all__) | own <= set(registry.__all__)
    assert len(registry.__all__) == len(set(registry.__all__))  # nothing listed twice
    for name in registry.__all__:
        assert hasattr(registry, name), name
    for name in policies.__all__:
        assert getattr(registry, name) is getattr(policies, name), name


def test_policies_and_the_deployable_sets():
    assert registry.POLICIES == (*policies.REGISTRY, "oracle")
    assert set(registry.DEPLOYABLE) <= set(policies.REGISTRY)
    assert set(registry.GRAPH_DEPLOYABLE) <= set(registry.DEPLOYABLE)
    assert registry.deployable_in("graph") == registry.GRAPH_DEPLOYABLE
    assert registry.deployable_in("eager") == registry.DEPLOYABLE
