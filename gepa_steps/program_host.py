"""The GEPA program host: runs a client's DSPy program inside its sandbox container.

Runs in the container only (the image's CPython, DSPy and the repository's requirements mounted
read-only on PYTHONPATH). It imports DSPy once, then serves JSON lines on stdin/stdout:

    {"id": "r1", "op": "run", "worktree": "/worktrees/p1", "program_json_path": "program.json",
     "entry_point": "qa.QA", "examples": [{...}], "capture_traces": false, "timeout_s": 60}
 -> {"id": "r1", "ok": true, "pipeline_outputs": [{"example_id": 0, "output": {...}}], "traces": null}

Every request runs in a process forked for it (DSPy already imported, so a step starts in
milliseconds), so steps run side by side and one step's imports, globals and crashes never reach
another's. A child past its deadline is killed.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import select
import signal
import sys
import time
import traceback

# Outputs travel back through Temporal, whose payloads are limited to 2 MB by default.
MAX_REPLY_BYTES = 1536 * 1024


def _configure_dspy():
    import dspy

    # The LM goes through the worker's egress gateway, which adds the real key: the container
    # never sees it. Disk caching is off (the root file system is read-only).
    dspy.configure_cache(enable_disk_cache=False, enable_memory_cache=False)
    model = os.environ.get("GENESIS_LM_MODEL")
    if model:
        dspy.configure(
            lm=dspy.LM(
                model,
                api_base=os.environ["GENESIS_LM_BASE_URL"],
                api_key=os.environ.get("GENESIS_LM_API_KEY", "sandbox"),
                cache=False,
                num_retries=0,
            )
        )
    return dspy


def _plain(value):
    """Program outputs as JSON data: Predictions and Examples as dicts, the rest as is or str."""
    if hasattr(value, "toDict"):
        value = value.toDict()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "model_dump"):
        return _plain(value.model_dump())
    return str(value)


def _error_text(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
    return f"{type(exc).__name__}: {exc}{where}"


def _load_program(dspy, request):
    worktree = request["worktree"]
    os.chdir(worktree)
    sys.path.insert(0, worktree)
    module_name, _, class_name = request["entry_point"].rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise RuntimeError(f"importing {module_name!r} failed: {_error_text(exc)}") from None
    cls = getattr(module, class_name, None)
    if cls is None:
        raise RuntimeError(f"module {module_name!r} has no {class_name!r}")
    try:
        program = cls()
    except Exception as exc:
        raise RuntimeError(f"{request['entry_point']}() failed: {_error_text(exc)}") from None
    path = os.path.join(worktree, request["program_json_path"])
    if not os.path.isfile(path):
        raise RuntimeError(f"{request['program_json_path']} does not exist in the program's branch")
    try:
        program.load(path)
    except Exception as exc:
        raise RuntimeError(f"loading {request['program_json_path']} failed: {_error_text(exc)}") from None
    return program


def _inputs_for(program, example: dict) -> dict:
    """The example's fields that forward() takes (GEPA sends inputs and labels together)."""
    # Through the class: DSPy warns when forward is looked up on an instance.
    params = dict(inspect.signature(type(program).forward).parameters)
    params.pop("self", None)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return dict(example)
    return {k: v for k, v in example.items() if k in params}


def run(request) -> dict:
    dspy = _configure_dspy()
    program = _load_program(dspy, request)
    names = {id(p): name for name, p in program.named_predictors()}
    outputs: list[dict] = []
    traces: list[dict] | None = [] if request.get("capture_traces") else None
    errors = 0
    for index, example in enumerate(request["examples"]):
        trace: list = []
        entry: dict[str, object] = {"example_id": index}
        try:
            with dspy.context(trace=trace):
                entry["output"] = _plain(program(**_inputs_for(program, example)))
        except Exception as exc:
            errors += 1
            entry.update(output=None, error=_error_text(exc))
        outputs.append(entry)
        if traces is not None:
            traces.append(
                {
                    "example_id": index,
                    "steps": [
                        {
                            "predictor": names.get(id(predictor), type(predictor).__name__),
                            "inputs": _plain(inputs),
                            "outputs": _plain(prediction),
                        }
                        for predictor, inputs, prediction in trace
                    ],
                }
            )
    if outputs and errors == len(outputs):
        return {
            "ok": False,
            "error": f"the program raised on every example; first: {outputs[0]['error']}",
            "pipeline_outputs": outputs,
            "traces": traces,
        }
    return {"ok": True, "pipeline_outputs": outputs, "traces": traces}


def _child(request, write_fd: int) -> None:
    try:
        reply = run(request)
    except BaseException as exc:  # noqa: BLE001 - everything becomes the step's error
        reply = {"ok": False, "error": str(exc) if isinstance(exc, RuntimeError) else _error_text(exc)}
    data = json.dumps(reply, default=str).encode()
    if len(data) > MAX_REPLY_BYTES:
        data = json.dumps(
            {
                "ok": False,
                "error": f"the outputs and traces are {len(data):,} bytes of JSON; the limit "
                f"is {MAX_REPLY_BYTES:,} (send fewer examples per step)",
            }
        ).encode()
    view = memoryview(data)
    while view:
        view = view[os.write(write_fd, view) :]
    os.close(write_fd)


def _send(reply: dict) -> None:
    sys.stdout.write(json.dumps(reply, default=str) + "\n")
    sys.stdout.flush()


def serve() -> None:
    _configure_dspy()  # import DSPy (and litellm) once, before any fork
    _send({"id": None, "ok": True, "ready": True, "python": sys.version.split()[0]})
    children: dict[int, dict] = {}  # read fd -> {id, pid, deadline, chunks}
    stdin_fd = sys.stdin.buffer.fileno()
    buffer = b""
    while True:
        now = time.monotonic()
        for fd, child in list(children.items()):
            if now > child["deadline"]:
                os.kill(child["pid"], signal.SIGKILL)
                os.waitpid(child["pid"], 0)
                os.close(fd)
                del children[fd]
                _send(
                    {
                        "id": child["id"],
                        "ok": False,
                        "error": f"the program did not finish within {child['timeout']:g}s and was killed",
                    }
                )
        timeout = max(min((c["deadline"] for c in children.values()), default=now + 1) - now, 0.01)
        readable, _, _ = select.select([stdin_fd, *children], [], [], timeout)
        for source in readable:
            if source == stdin_fd:
                data = os.read(stdin_fd, 1 << 20)
                if not data:  # the worker closed our stdin: finish
                    for child in children.values():
                        os.kill(child["pid"], signal.SIGKILL)
                    return
                buffer += data
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    if line.strip():
                        _start(json.loads(line), children)
                continue
            chunk = os.read(source, 1 << 20)
            child = children[source]
            if chunk:
                child["chunks"].append(chunk)
                continue
            os.close(source)
            os.waitpid(child["pid"], 0)
            del children[source]
            try:
                reply = json.loads(b"".join(child["chunks"]))
            except ValueError:
                reply = {"ok": False, "error": "the program's process died without an answer (out of memory or killed)"}
            reply["id"] = child["id"]
            _send(reply)


def _start(request: dict, children: dict) -> None:
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        os.dup2(2, 1)  # what the program prints goes to stderr, never into the protocol
        sys.stdout = sys.stderr
        try:
            _child(request, write_fd)
        finally:
            os._exit(0)
    os.close(write_fd)
    timeout = float(request.get("timeout_s", 120))
    children[read_fd] = {
        "id": request.get("id"),
        "pid": pid,
        "deadline": time.monotonic() + timeout,
        "timeout": timeout,
        "chunks": [],
    }


if __name__ == "__main__":
    serve()
