"""GPU tests of the fused epilogues' lab candidates (lab.epilogue_variants.LAB_VARIANTS): each
checked against the rule's kernels as tests/test_epilogue_variants.py checks the shipped ones."""

from __future__ import annotations

import pytest

from lab.epilogue_variants import LAB_VARIANTS
from tests.layouts import gpu_only
from tests.test_epilogue_variants import check_variant, params


@gpu_only
@pytest.mark.parametrize("name,flags,D", params(LAB_VARIANTS))
def test_candidate_matches_the_rule_kernels(name, flags, D):
    check_variant(name, LAB_VARIANTS[name], flags, D)
