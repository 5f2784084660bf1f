"""The order a parallel run (``-n``) hands tests out in: the known-long ones first, so that none starts last.

xdist's ``load`` scheduling sends each worker a chunk of consecutive tests, in collection order, and tops it up
as it goes. A 90-second test that happens to come late then runs alone at the end while the other workers are
idle. ``LongFirst`` hands the tests of ``LONG`` out before all others, two at a time at most (a worker runs a
test only once it holds the next), and then schedules the rest exactly as ``load`` does.
"""

from __future__ import annotations

from typing import Any

from xdist.scheduler import LoadScheduling

LONG = (
    # Call durations under CI's load (.ci/run, 2026-12-06), longest first; a prefix of the node id, so every
    # parametrization of a test counts. A name that no longer matches only loses its place in the queue.
    "tests/integration/test_gc_older_than.py::test_gc_older_than_removes_exactly_the_old_ended_sessions",  # 91 s
    "tests/security/test_egress.py::test_a_wildcard_name_whose_answer_turns_private_is_refused",  # 63 s
    "tests/security/test_robustness.py::test_listing_a_directory_ten_thousand_levels_deep",  # 38 s
    "tests/integration/test_cli_review.py::test_changes_apply_conflict_force_revert_rewind_discard",  # 37 s
    "tests/security/test_api_input.py::test_openapi_conformance",  # 31 s
    "tests/security/test_filesystem.py::test_symlink_to_root_and_host_dirs",  # 30 s
    "tests/faults/test_controller_faults.py::test_sigkill_mid_command_loses_no_acknowledged_event",  # 30 s
    "tests/faults/test_controller_faults.py::test_a_controller_stopped_while_a_layer_is_being_mounted",  # 15 s a slow mount
    "tests/security/test_robustness.py::test_a_gigabyte_of_output",  # 65 s for two gigabytes; one now
    "tests/integration/test_image_package.py::test_wheel_install_builds_the_sandbox_and_proxy_images",  # 27 s
    "tests/integration/test_stored_output_cap.py::test_two_hundred_noisy_commands_stay_under",  # 24 s
    "tests/integration/test_setup_step.py::test_a_setup_or_build_that_fails_or_hangs_ends_the_session",  # 22 s
    "tests/integration/test_nonroot_controller.py::test_a_controller_that_is_not_root_runs",  # 21 s
    "tests/integration/test_disk_quota.py::test_a_volume_the_environment_image_declares_is_a_sized_tmpfs",  # 21 s
    "tests/integration/test_environments.py::test_a_held_image_outlives_every_sweep",  # 18 s
    "tests/integration/test_project_environment.py::test_the_agent_runs_the_projects_own_tests_offline",  # 17 s
)


def rank(nodeid: str) -> int:
    """The test's place in ``LONG``; every other test comes after them all (``len(LONG)``)."""
    return next((place for place, prefix in enumerate(LONG) if nodeid.startswith(prefix)), len(LONG))


class LongFirst(LoadScheduling):
    """``load`` scheduling, but the tests of ``LONG`` go out first, longest first, each to the next worker free."""

    def __init__(self, config: Any, log: Any = None) -> None:
        super().__init__(config, log)
        self.ordered = False

    def _send_tests(self, node: Any, num: int) -> None:
        if not self.ordered:  # the first sending: the collection is known, nothing has gone out yet
            assert self.collection is not None
            self.pending.sort(key=lambda index: rank(self.collection[index]))  # stable: the rest keeps its order
            self.ordered = True
        if self.pending and rank(self.collection[self.pending[0]]) < len(LONG):
            num = min(num, max(1, 2 - len(self.node2pending[node])))  # a long one: keep the worker at two
        super()._send_tests(node, num)
