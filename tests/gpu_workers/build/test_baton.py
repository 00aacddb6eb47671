"""torch's build baton on a live lock: a builder that was killed holds nothing back."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

from gpu_workers.build.baton import LiveBaton

REPO_ROOT = Path(__file__).resolve().parents[3]

# Takes the batons it is given, says so, holds them until its input closes (or it is killed), then
# releases them.
HOLDER = """
import sys
from gpu_workers.build.baton import LiveBaton
batons = [LiveBaton(path) for path in sys.argv[1:]]
assert all(b.try_acquire() for b in batons)
print("held", flush=True)
sys.stdin.read()
for baton in batons:
    baton.release()
"""


def hold(paths: list[Path]) -> subprocess.Popen:
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, *map(str, paths)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert holder.stdout.readline() == "held\n"
    return holder


def test_a_baton_is_held_while_its_holder_lives_and_taken_over_once_it_is_killed(tmp_path):
    # given a process that holds a build's baton
    path = tmp_path / "lock"
    holder = hold([path])
    assert LiveBaton(str(path)).held()

    # when it is killed mid-build (its baton file stays behind, as torch's would)
    holder.kill()
    holder.wait()
    assert path.exists()

    # then the next builder takes the baton at once, and knows from whom
    assert not LiveBaton(str(path)).held()
    baton = LiveBaton(str(path))
    assert baton.try_acquire() is True
    assert baton.taken_from == str(holder.pid)
    baton.release()
    assert not path.exists()


def test_a_builder_that_waited_for_a_live_holder_takes_a_fresh_baton_after_it(tmp_path):
    # given a live holder
    path = tmp_path / "lock"
    holder = hold([path])

    # when another builder asks for it, and the holder then finishes and releases it
    baton = LiveBaton(str(path))
    taken: list[bool] = []
    waiter = threading.Thread(target=lambda: taken.append(baton.try_acquire()))
    waiter.start()
    holder.stdin.close()
    holder.wait()
    waiter.join(timeout=60)

    # then the other takes a new baton, not one left behind
    assert taken == [True]
    assert baton.taken_from is None
    assert path.read_text() == f"{os.getpid()}\n"
    baton.release()


def test_torch_takes_the_live_baton_in_a_child_that_may_build():
    # given a process where the candidate's load_inline was installed (as every child that builds does)
    probe = ("import os; os.environ['TORCH_EXTENSIONS_DIR'] = '/nonexistent'; "
             "from gpu_workers.build import inline; inline.install(); "
             "from torch.utils import cpp_extension, file_baton; "
             "print(cpp_extension.FileBaton.__module__, file_baton.FileBaton.__name__)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})

    # then torch's builds there use the live baton
    assert done.stdout.split() == ["gpu_workers.build.baton", "LiveBaton"]
