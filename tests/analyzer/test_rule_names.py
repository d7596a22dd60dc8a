"""The rules' names (`dc_core.model.rules`) are the analyzer's: the ids it
registers, in its order, and the thresholds it applies; a config reads them
without importing the analyzer."""

import subprocess
import sys

from dc_core import analyzer
from dc_core.analyzer import thresholds
from dc_core.model import rules


def test_rule_ids_are_the_registered_rules_in_their_order():
    assert rules.RULE_IDS == tuple(dict.fromkeys([*analyzer.RULES, *analyzer.RANK_RULES]))
    assert analyzer.RULE_IDS is rules.RULE_IDS


def test_the_analyzer_applies_the_named_defaults():
    assert thresholds.DEFAULTS is rules.DEFAULTS is analyzer.DEFAULTS
    assert thresholds.Thresholds()["hotspot.min_share"] == rules.DEFAULTS["hotspot.min_share"]
    assert {key.partition(".")[0] for key in rules.DEFAULTS} <= {*rules.RULE_IDS, "system"}


def test_a_config_checks_its_overrides_without_importing_the_analyzer():
    code = (
        "import sys\n"
        "from dc_core import ProfilerConfig\n"
        "assert ProfilerConfig(analyzer={'hotspot.top': 2, 'gpu_idle.enabled': 0}).analyzer['hotspot.top'] == 2.0\n"
        "try:\n"
        "    ProfilerConfig(analyzer={'hotspot.nope': 1})\n"
        "except ValueError as e:\n"
        "    assert 'hotspot.min_share' in str(e), e\n"
        "else:\n"
        "    raise AssertionError('an unknown threshold passed')\n"
        "print(sorted(m for m in sys.modules if m.startswith('dc_core.analyzer')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
