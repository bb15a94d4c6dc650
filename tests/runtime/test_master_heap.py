"""The master process leaves its start-up heap out of later collections (docs/internals/
tracing-log.md, "the master's share"): its trace store's growth sets off full collections,
which traversed every object the imports and the parts had made."""

from __future__ import annotations

import subprocess
import sys
import textwrap

# the master's main() in a process of its own, with a stand-in for the master whose
# run() reports what the collector still sees of what its constructor made
MAIN = textwrap.dedent("""
    import gc
    from runtime.processes import master

    master._procs.read_boot = dict
    master._procs.setup_logging = lambda *a: None
    master._detached.write_master = lambda *a: None

    class StartedMaster:
        boot_run_dir = endpoint = ""

        def __init__(self, boot):
            self.made = [[i] for i in range(1000)]

        def run(self):
            seen = {id(o) for o in gc.get_objects()}
            print(gc.get_freeze_count() > 1000, any(id(o) in seen for o in self.made),
                  gc.get_threshold() == master.COLLECT_EVERY)

    master.TopologyMaster = StartedMaster
    master.main()
""")


def test_the_master_freezes_what_its_start_up_made_and_collects_less_often():
    out = subprocess.run([sys.executable, "-c", MAIN], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert out.split()[-3:] == ["True", "False", "True"]
