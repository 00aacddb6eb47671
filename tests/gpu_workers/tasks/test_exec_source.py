"""tasks.exec_source: a task's or candidate's text run as a module, its source readable as a file's."""

from __future__ import annotations

import inspect
import linecache
import sys
import traceback

import pytest

from gpu_workers.tasks import exec_source

SOURCE = '''
def double(x):
    return 2 * x


def fail():
    raise ValueError("from the candidate")
'''


@pytest.fixture()
def module():
    module = exec_source(SOURCE, "kernelcourt_test_exec_source", "<test kernel>")
    yield module
    sys.modules.pop("kernelcourt_test_exec_source", None)
    linecache.cache.pop("<test kernel>", None)


def test_a_functions_source_is_readable_as_libraries_read_it(module):
    # what triton.jit and torch.jit.script ask for; an exec'd string has no file to give it
    lines, start = inspect.getsourcelines(module.double)
    assert start == 2 and lines == ["def double(x):\n", "    return 2 * x\n"]
    linecache.checkcache()  # a cache check finds no file to compare with and keeps the text
    assert inspect.getsource(module.double).startswith("def double(x):")


def test_a_traceback_shows_the_line_that_raised(module):
    with pytest.raises(ValueError) as raised:
        module.fail()
    text = "".join(traceback.format_exception(raised.value))
    assert 'File "<test kernel>", line 7, in fail' in text
    assert 'raise ValueError("from the candidate")' in text
