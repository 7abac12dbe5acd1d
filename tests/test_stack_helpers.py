"""The test stacks' own helpers (tests/stack.py), where a wrong reading would fail other tests
at random."""

from tests.stack import StackBase


def test_a_fake_run_being_logged_is_not_read_half_written(tmp_path):
    """A fake CLI appends its record while a test reads the log (CI: JSONDecodeError on a
    record read half written): only whole lines are runs."""
    stack = StackBase(tmp_path)
    stack.fake_log.write_text('{"cli": "claude", "input_path": "a.md"}\n{"cli": "gem')
    assert stack.fake_runs() == [{"cli": "claude", "input_path": "a.md"}]
    with stack.fake_log.open("a") as log:
        log.write('ini", "input_path": "b.md"}\n')
    assert [run["cli"] for run in stack.task_runs()] == ["claude", "gemini"]
