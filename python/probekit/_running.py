"""How the package runs the library: work on a thread of its own (so Ctrl-C reaches Python and stops it cleanly),
progress as tqdm bars, and keyword arguments spelled as the tools' flags."""

import json
import operator
import os
import sys
import threading
import warnings

from . import _native


def run_interruptibly(function, *args):
    """Runs function(*args) on a worker thread and returns its result. The native call releases the GIL, so the main
    thread keeps receiving Ctrl-C: then the library is asked to stop at its next step, the worker is waited for until
    its call has ended, and KeyboardInterrupt is raised. The worker's own exception is raised here as it is."""
    outcome = {}
    finished = threading.Event()

    def work():
        try:
            outcome["value"] = function(*args)
        except BaseException as error:  # handed to the caller's thread
            outcome["error"] = error
        finally:
            finished.set()

    worker = threading.Thread(target=work, name="probekit", daemon=True)
    worker.start()
    try:
        # Not Thread.join: on CPython 3.11 a join that Ctrl-C interrupts marks the thread stopped while it still runs.
        while not finished.is_set():
            finished.wait(0.1)
    except KeyboardInterrupt:
        stop_and_wait(finished)
        raise
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("value")


def stop_and_wait(finished):
    """Asks the library to stop and waits until the worker's call has ended, letting no further Ctrl-C cut the wait
    short (a call left running holds its run's lock, and aborts the process at exit); then forgets the request, so
    that it stops no later call."""
    while True:
        try:
            while not finished.is_set():
                _native.request_interrupt()  # again and again: a call just starting forgets the requests made before it
                finished.wait(0.1)
            break
        except KeyboardInterrupt:
            continue
    _native.clear_interrupt()


def _shows_progress():
    """Whether a bar can be seen: in a notebook (an IPython kernel) or with stderr on a terminal."""
    shell = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
    if shell is not None and type(shell).__name__ == "ZMQInteractiveShell":
        return True
    return hasattr(sys.stderr, "isatty") and sys.stderr.isatty()


class TqdmBars:
    """The library's progress bars as tqdm bars, one per bar label."""

    def __init__(self, tqdm):
        self._tqdm = tqdm
        self._bars = {}

    def __call__(self, label, unit, done, total, finished):
        bar = self._bars.get(label)
        if bar is None:
            bar = self._tqdm(total=total or None, desc=label, unit=unit, unit_scale=unit == "bytes", leave=True)
            self._bars[label] = bar
        bar.update(done - bar.n)
        if finished:
            bar.close()
            del self._bars[label]


def progress_callback(progress):
    """The callback the native calls report progress to: tqdm bars when asked for, tqdm is installed and someone can
    see them; else None (no bars at all)."""
    if not progress or not _shows_progress():
        return None
    try:
        with warnings.catch_warnings():  # without ipywidgets, tqdm.auto falls back to text bars, warning about it
            warnings.simplefilter("ignore")
            from tqdm.auto import tqdm
    except ImportError:
        return None
    return TqdmBars(tqdm)


def flag_arguments(flags):
    """Keyword arguments as a tool's command line: foo_bar=1 -> --foo-bar 1, True -> --foo-bar, False or None -> left
    out, a list or tuple -> --foo-bar each value."""
    arguments = []
    for name, value in flags.items():
        flag = "--" + name.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            arguments.append(flag)
        elif isinstance(value, (list, tuple)):
            arguments += [flag] + [str(item) for item in value]
        else:
            arguments += [flag, str(value)]
    return arguments


def steer_items(steer):
    """steer=[(label or vector, layer, coefficient), ...] as the native calls take it: vectors (a torch tensor or any
    sequence of numbers) as lists of floats."""
    if steer is None:
        return []
    if isinstance(steer, tuple) and len(steer) == 3 and not isinstance(steer[0], tuple):
        steer = [steer]
    items = []
    for item in steer:
        if not isinstance(item, (tuple, list)) or len(item) != 3:
            raise ValueError(f"steer: each item is (label or vector, layer, coefficient), got {item!r}")
        what, layer, coefficient = item
        if not isinstance(what, str):
            what = [float(x) for x in (what.detach().float().cpu().reshape(-1).tolist() if hasattr(what, "detach") else what)]
        items.append((what, whole_number(layer, "steer: the layer"), float(coefficient)))
    return items


def text_list(texts, name="texts"):
    """A list of non-blank strings from one string or an iterable of them (a blank text is refused, as the tools
    refuse --text "" and a dataset's empty text)."""
    one = isinstance(texts, str)
    texts = [texts] if one else list(texts)
    for index, text in enumerate(texts):
        where = name if one else f"{name}[{index}]"
        if not isinstance(text, str):
            raise ValueError(f"{where}: expected a string, got {type(text).__name__}")
        if not text.strip():
            raise ValueError(f"{where} is empty: give the text to analyze")
    return texts


def whole_number(value, name):
    """value as an int the native calls take (64 bits); 0.5, which int() read as 0, "3", and a number past 64 bits
    (pybind11's TypeError with its signature) are refused with a ValueError naming `name`."""
    try:
        number = operator.index(value)
    except TypeError:
        raise ValueError(f"{name}: {value!r} is not a whole number") from None
    if not -2**63 <= number < 2**63:
        raise ValueError(f"{name}: {value!r} is past the 64-bit range")
    return number


def positive_whole_number(value, name):
    """value as a whole number of 1 or more (True, which int() reads as 1, is none), else a ValueError naming `name`."""
    if isinstance(value, bool) or whole_number(value, name) < 1:
        raise ValueError(f"{name} {value!r}: must be a whole number, 1 or more")
    return value


def layer_selection(layers, name="layers"):
    """layers as the tools take them: None -> the default, 8 -> "8", [8, 17] -> "8,17", "21-30" or "all" as is; an
    empty list, which would read as the default, is refused."""
    if layers is None:
        return ""
    if isinstance(layers, bool):
        raise ValueError(f"{name} {layers!r}: expected a whole number, a list of them, or text such as \"0-5\" or \"all\"")
    if isinstance(layers, str):
        if not layers.strip():
            raise ValueError(f"{name}: an empty text selects nothing (leave {name} out for its default)")
        return layers
    if isinstance(layers, int):
        return str(layers)

    def whole(item):
        if isinstance(item, bool):
            raise ValueError(f"{name}: {item!r} is not a layer or position number")
        return item if isinstance(item, str) else str(whole_number(item, name))  # "3": read as --layers reads it

    try:
        selected = ",".join(whole(layer) for layer in layers)
    except TypeError:
        raise ValueError(f"{name} {layers!r}: expected a whole number, a list of them, or text such as \"0-5\" or "
                         f"\"all\"") from None
    if not selected:
        raise ValueError(f"{name}: an empty list selects nothing (leave {name} out for its default)")
    return selected


def given_text(value, name, has_default=False, path=False):
    """value when it is a non-empty string (with path, a pathlib.Path too); a ValueError naming `name` otherwise, where
    the native call would show its own signature or read an empty text as the argument left out."""
    if path and isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise ValueError(f"{name}: expected a string, got {type(value).__name__}")
    if not value:
        raise ValueError(f"{name} is empty: give a value" + (f", or leave {name} out" if has_default else ""))
    return value


def seed_value(seed):
    """seed as the native calls take it, an unsigned 64-bit number; anything else is refused with a ValueError."""
    try:
        value = operator.index(seed)
    except TypeError:  # 1.5, "3": not a whole number
        value = -1
    if not 0 <= value < 2**64:
        raise ValueError(f"seed {seed!r}: must be a whole number from 0 to 2**64 - 1")
    return value


def conversation_text(texts, messages, tools, steer, name):
    """messages= (with tools=) as the native side takes it, JSON text as chat::conversation_text writes it: the list
    of messages, or {"messages", "tools"}; None for texts. One of texts and messages must be given."""
    if messages is None:
        if tools is not None:
            raise ValueError(f"tools need messages: the chat template renders them into a conversation, and {name}= "
                             "is scored as written")
        if texts is None:
            raise ValueError(f"give {name} or messages")
        return None
    if texts is not None:
        raise ValueError(f"give {name} or messages (one conversation), not both")
    if not isinstance(messages, (list, tuple)) or not messages or not all(isinstance(m, dict) for m in messages):
        raise ValueError("messages: expected one conversation, a list of {'role', 'content'} dicts")
    if tools is not None and (not isinstance(tools, (list, tuple)) or not all(isinstance(t, dict) for t in tools)):
        raise ValueError("tools: expected a list of functions, {'type': 'function', 'function': {'name', ...}} dicts")
    if steer:
        raise ValueError("steer applies to texts, not to messages")
    text = json_text(list(messages), "messages")
    return text if tools is None else f'{{"messages": {text}, "tools": {json_text(list(tools), "tools")}}}'


def json_text(value, name):
    """value as JSON text; NaN and infinities, which are not JSON, refused here naming the argument (natively they
    would be a parse error)."""
    try:
        return json.dumps(value, allow_nan=False)
    except ValueError as error:
        raise ValueError(f"{name}: {error}") from None
