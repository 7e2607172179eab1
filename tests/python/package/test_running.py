"""How the package runs the library: Ctrl-C stops a call at its next step, and a generation runs only while it is
read (it waits for a reader who stops reading, stops when the reader leaves, and never outlives the interpreter)."""

import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time

import pytest

import probekit
from probekit import _native, model as model_module, tools as tools_module


def generation_threads():
    return [thread for thread in threading.enumerate() if thread.name == "probekit-generate"]


def test_leaving_a_generation_early_stops_it(model):
    for event in model.generate(["The garage was", "I looked again"], max_new_tokens=64, stop=False):
        assert event["index"] == 0
        break
    assert not generation_threads() and not model_module._Generation.running


def test_a_generation_nobody_reads_waits_for_its_reader(model, monkeypatch):
    """Regression: the events queued without bound, so a generator kept unread generated to max_new_tokens."""
    monkeypatch.setattr(model_module, "_EVENTS_AHEAD", 8)
    events = model.generate("The garage was", max_new_tokens=4000, stop=False)
    assert next(events)["index"] == 0
    deadline = time.monotonic() + 60
    while not model_module._Generation.running or next(iter(model_module._Generation.running)).events.qsize() < 8:
        assert time.monotonic() < deadline, "the generation made no 8 events in 60 s"
        time.sleep(0.05)
    before = resource.getrusage(resource.RUSAGE_SELF)
    time.sleep(1.0)
    after = resource.getrusage(resource.RUSAGE_SELF)
    busy = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert busy < 0.3, f"an unread generation used {busy:.2f} s of CPU in 1 s"
    assert [event["index"] for event in (next(events), next(events))] == [1, 2]  # it goes on where it waited
    events.close()
    assert not generation_threads()


def test_a_generator_kept_unfinished_at_exit_ends_the_process_cleanly(model_dir):
    """Regression: the generation ran on during the interpreter's shutdown and aborted the process (SIGABRT)."""
    script = ("import sys, probekit; model = probekit.load_model(sys.argv[1], device='cpu'); "
              "events = model.generate('The garage was', max_new_tokens=4000, stop=False); next(events)")
    done = subprocess.run([sys.executable, "-c", script, model_dir], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"exit {done.returncode}:\n{done.stderr[-3000:]}"


def test_ctrl_c_interrupts_a_capture(model, texts, monkeypatch):
    def interrupt_at_first_report(*_):
        _native.request_interrupt()

    monkeypatch.setattr(model_module, "progress_callback", lambda progress: interrupt_at_first_report)
    with pytest.raises(KeyboardInterrupt):
        model.capture(texts, layers=2, batch_size=1)
    monkeypatch.undo()
    assert model.capture(texts[:2], layers=2)[2].shape[0] == 2  # the next call runs


def test_ctrl_c_interrupts_capture_activations_which_then_resumes(model, dataset, workdir, monkeypatch):
    def interrupt_at_first_report(*_):
        _native.request_interrupt()

    output = workdir / "interrupted"
    monkeypatch.setattr(tools_module, "progress_callback", lambda progress: interrupt_at_first_report)
    with pytest.raises(KeyboardInterrupt):
        probekit.capture_activations(model, dataset, str(output), layers=[2], batch_size=1, window=8)
    monkeypatch.undo()
    summary = probekit.capture_activations(model, dataset, str(output), layers=[2], batch_size=1, window=8, resume=True)
    assert summary["layers"] == [2] and (output / "layer_2_activations.h5").exists()


def long_texts():
    with open(probekit.example_dataset()) as source:
        return [json.loads(line)["text"] for line in source] * 4  # far longer than the 0.2 s before Ctrl-C


class CtrlC:
    """Sends SIGINT to this process once a thread of that name has run for `seconds`, unless the call has ended by
    then (a SIGINT after it would stop the test session); `seen`: the threads it saw."""

    def __init__(self, seconds, thread_name):
        self.seen, self.ended = [], threading.Event()
        self.sender = threading.Thread(target=self._send, args=(seconds, thread_name))

    def _send(self, seconds, thread_name):
        deadline = time.monotonic() + 60
        while not self.seen and time.monotonic() < deadline and not self.ended.is_set():
            self.seen.extend(thread for thread in threading.enumerate() if thread.name == thread_name)
            time.sleep(0.01)
        if self.seen and not self.ended.wait(seconds):
            os.kill(os.getpid(), signal.SIGINT)

    def __enter__(self):
        self.sender.start()
        return self

    def __exit__(self, *_):
        self.ended.set()
        self.sender.join()


def test_a_real_ctrl_c_raises_once_the_interrupted_call_has_ended(model):
    """SIGINT itself, from another thread, during a long capture: KeyboardInterrupt comes once the native call has
    stopped, and the next call runs. (CPython 3.11's Thread.join, interrupted, once let KeyboardInterrupt through
    while the capture ran on; the next call then forgot the request and the capture ran to its end.)"""
    with pytest.raises(KeyboardInterrupt), CtrlC(0.2, "probekit") as ctrl_c:
        model.capture(long_texts(), layers=2, batch_size=1, progress=False)
    assert model.capture(long_texts()[:2], layers=2, progress=False)[2].shape[0] == 2  # the next call, at once
    running = [thread for thread in ctrl_c.seen if thread in threading.enumerate()]
    assert not running, f"the interrupted capture's worker still runs after the next call: {running}"


@pytest.mark.parametrize("call", [
    lambda model, probes: probes.rank(model, long_texts()[:80]),  # a few seconds each on two cores
    lambda model, probes: probes.per_token(model, " ".join(long_texts()[:8])),
], ids=["rank", "per_token"])
def test_ctrl_c_stops_scoring_at_its_next_pass(model, probes_dir, call):
    """Regression: scoring has no progress reports, where Ctrl-C used to be seen, so it came only once all was scored."""
    probes = probekit.load_probes(probes_dir)
    started = time.monotonic()
    call(model, probes)
    whole = time.monotonic() - started
    if whole < 0.5:
        pytest.skip(f"scoring took {whole:.2f} s here: too short to interrupt halfway")
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt), CtrlC(whole / 5, "probekit"):
        call(model, probes)
    taken = time.monotonic() - started
    assert taken < whole * 0.7, f"Ctrl-C at {whole / 5:.2f} s stopped the call at {taken:.2f} s, of {whole:.2f} s"
    assert len(probes.rank(model, ["The garage was"])) == 1  # the next call runs


def test_ctrl_c_stops_a_generation_and_the_next_one_runs(model):
    with pytest.raises(KeyboardInterrupt), CtrlC(0.2, "probekit-generate"):
        for _ in model.generate("The garage was", max_new_tokens=4000, stop=False):
            pass
    assert not generation_threads()
    assert len(list(model.generate("The garage was", max_new_tokens=2, stop=False))) == 3
