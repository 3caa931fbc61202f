"""The embedded llama.cpp server on loopback: with the real Gemma 3 270M model (marked ``model``),
and with a stand-in server that crashes (no model needed)."""

import json
import math
import os
import socket
import sys
import time
from pathlib import Path

import pytest

from fabnb.core.text import quoted_share
from fabnb.models.llm import LLMError, ResponseCache
from fabnb.models.local import PORTABLE_INSTALL, LocalServer, build_report
from fabnb.qa.generation import GenerationConfig, generate_qa

from conftest import ROOT
from gen_helpers import notebook_parameters, notebook_turn

FAKE = [sys.executable, str(Path(__file__).with_name("fake_llama_server.py"))]


@pytest.fixture
def gguf(tmp_path):
    path = tmp_path / "fake.gguf"
    path.write_bytes(b"GGUF" + bytes(64))
    return path


@pytest.mark.parametrize("die,named", [("sigill", "signal SIGILL"), ("exit1", "exit code 1")])
def test_a_server_that_dies_on_its_first_answer_names_its_death_at_start(gguf, monkeypatch, die, named):
    monkeypatch.setenv("FAKE_LLAMA_DIE", die)
    server = LocalServer(model=gguf, command=FAKE, startup_timeout=20)
    began = time.monotonic()
    with pytest.raises(LLMError) as info:
        server.start()
    assert time.monotonic() - began < 5
    err = info.value
    assert err.cause == "server-died" and named in str(err) and "while starting" not in str(err)
    assert "dying" in str(err)  # the last lines of the server's log
    if die == "sigill":
        assert PORTABLE_INSTALL in str(err) and "CPU instructions" in str(err)
    assert not server.running


def test_a_server_that_dies_mid_study_ends_the_call_at_once(gguf, monkeypatch):
    monkeypatch.setenv("FAKE_LLAMA_DIE", "sigill")
    monkeypatch.setenv("FAKE_LLAMA_DIE_AFTER", "2")  # the start's own probe is answered
    with LocalServer(model=gguf, command=FAKE, startup_timeout=20) as server:
        llm = server.llm(cache=False, max_retries=4, backoff=1.0)
        began = time.monotonic()
        with pytest.raises(LLMError) as info:
            llm.complete("Say OK.", max_tokens=2)
        took = time.monotonic() - began
    assert took < 5, f"{took:.1f} s: retried a dead server"
    assert info.value.cause == "server-died" and info.value.attempts == 1
    assert "signal SIGILL" in str(info.value) and "while answering" in str(info.value)


def test_the_server_runs_with_one_malloc_arena_unless_the_user_chose(gguf, monkeypatch):
    """glibc's per-thread arenas kept what grammars once took: one arena, unless MALLOC_ARENA_MAX is set."""
    monkeypatch.setenv("FAKE_LLAMA_DIE_AFTER", "99")
    monkeypatch.delenv("MALLOC_ARENA_MAX", raising=False)
    for chosen, expected in ((None, b"MALLOC_ARENA_MAX=1"), ("4", b"MALLOC_ARENA_MAX=4")):
        if chosen:
            monkeypatch.setenv("MALLOC_ARENA_MAX", chosen)
        with LocalServer(model=gguf, command=FAKE, startup_timeout=20) as server:
            environ = Path(f"/proc/{server.process.pid}/environ").read_bytes().split(b"\0")
        assert expected in environ


def test_bad_model_files_and_a_taken_port_fail_before_any_process(tmp_path, gguf):
    with pytest.raises(LLMError, match="does not exist") as info:
        LocalServer(model=tmp_path / "nope.gguf", command=FAKE).start()
    assert info.value.cause == "config"
    text = tmp_path / "model.gguf"
    text.write_text("not a model")
    server = LocalServer(model=text, command=FAKE)
    with pytest.raises(LLMError, match="is not a GGUF file"):
        server.start()
    assert server.process is None
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = LocalServer(model=gguf, command=FAKE, port=port)
        with pytest.raises(LLMError, match=f"port {port} on 127.0.0.1 is already in use"):
            server.start()
        assert server.process is None


def test_no_embedded_model_is_one_line_in_a_notebook_with_the_fix(monkeypatch, capsys):
    # A Binder image whose llama.cpp build failed: a notebook that needs an LLM shows one line naming the
    # fix (the portable install, or an endpoint); other fabnb errors keep their traceback.
    from IPython.core.interactiveshell import InteractiveShell

    monkeypatch.setitem(sys.modules, "llama_cpp.server", None)
    for name in ("FABNB_LLM_BASE_URL", "FABNB_LLM_MODEL", "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    shell = InteractiveShell.instance()
    try:
        shell.run_cell("from fabnb.models.local import LocalServer\nLocalServer().start()")
        shown = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
        assert len(shown) == 1 and shown[0].startswith("LLMError: the embedded model's server")
        assert PORTABLE_INSTALL in shown[0] and "FABNB_LLM_BASE_URL" in shown[0]
        shell.run_cell("from fabnb.core.errors import CausedError\nraise CausedError('slow', 'timeout')")
        shown = capsys.readouterr().out
        assert "Traceback (most recent call last)" in shown and len(shown.splitlines()) > 4
    finally:
        InteractiveShell.clear_instance()


@pytest.mark.model
def test_the_installed_llama_cpp_is_a_portable_build():
    """No AVX-512 register and no AMX instruction in any llama.cpp library (``objdump -d``).

    CI runs this right after the README's install, with a wheel of llama-cpp-python planted in pip's
    cache beforehand where pip looks for a build of the sdist (``.ci/plant_cached_wheel.py``; its package
    raises on import): the install must not have picked it up, and must be portable.
    """
    report = build_report()
    assert report["installed"], "llama-cpp-python is not installed"
    assert report["native_instructions"] is not None, "objdump is missing: install binutils"
    assert report["libraries"] and report["portable"], (
        f"{report['native_instructions']} AVX-512/AMX instructions in {report['libraries']}: a native build. "
        f"Reinstall: {PORTABLE_INSTALL}")


@pytest.fixture(scope="module")
def server():
    """Started with logits_all, which logprobs need; every call on it is several times slower."""
    with LocalServer(n_ctx=4096, logits_all=True) as s:
        yield s


@pytest.fixture(scope="module")
def fast_server():
    with LocalServer(n_ctx=4096) as s:
        yield s


@pytest.mark.model
def test_server_answers_with_usage_and_logprobs(server, tmp_path):
    llm = server.llm(cache=ResponseCache(tmp_path / "c.sqlite"))
    done = llm.complete("The capital of France is", max_tokens=8, temperature=0, logprobs=True, top_logprobs=3)
    assert done.text and done.prompt_tokens > 0 and 0 < done.completion_tokens <= 8
    first = done.logprobs[0]
    assert len(first["top_logprobs"]) == 3 and first["logprob"] <= 0
    assert math.isclose(first["logprob"], max(t["logprob"] for t in first["top_logprobs"]), abs_tol=1e-3)
    again = llm.complete("The capital of France is", max_tokens=8, temperature=0, logprobs=True, top_logprobs=3)
    assert again.cached and again.text == done.text


@pytest.mark.model
def test_schema_constrained_output_is_valid_json(fast_server):
    schema = {"type": "object", "properties": {"verdict": {"type": "string", "enum": ["yes", "no"]}},
              "required": ["verdict"]}
    llm = fast_server.llm(cache=False)
    done = llm.complete("Write a long story about a wafer fab.", max_tokens=20, temperature=0.9,
                        response_format={"type": "json_object", "schema": schema})
    assert json.loads(done.text)["verdict"] in ("yes", "no")


@pytest.mark.model
def test_generation_on_the_real_model_counts_and_retries_failures(fab_bench):
    """Notebook 03's generation (its parameters, its calls) on the real model. The replies go to the suite's
    response cache, so the notebook, run later in the suite, replays them instead of asking again."""
    from fabnb.corpus.collection import chunk_corpus
    from fabnb.corpus.synthesis import needle_in_haystack
    from fabnb.corpus.vectors import vectorize
    from fabnb.data.datasets import evidence_corpus
    from fabnb.models.local import default_llm

    nb = notebook_parameters("03_generate_qa.ipynb")
    assert nb["CORPUS"] is None  # the notebook's default: the FAB-Bench evidence corpus
    chunks = chunk_corpus(evidence_corpus(fab_bench), size=128, overlap=32)
    contexts = needle_in_haystack(chunks, vectorize(chunks), n=4 * nb["N_PAIRS"], n_distractors=nb["N_DISTRACTORS"],
                                  seed=nb["SEED"])
    with notebook_turn("03_generate_qa.ipynb"):  # never beside the notebook: the second replays the first's replies
        llm = default_llm()
        config = GenerationConfig(max_tokens=nb["MAX_TOKENS"], r_max=nb["R_MAX"])
        run = generate_qa(contexts, llm, n=nb["N_PAIRS"], chunks=chunks, seed=nb["SEED"], config=config)
    a = run.attempts
    assert len(run.pairs) >= 1, run.attempts[["failure", "message"]].to_string()
    failed = a[a.outcome == "failed"]
    assert len(failed) >= 1 and failed.failure.ne("").all()  # the small model fails, and it is counted
    for _, g in a.groupby("context_id"):
        assert g.temperature.is_monotonic_increasing  # Eq. 7: each failure raises tau
    pair = run.pairs[0]
    assert pair["generation_metadata"]["model"] == llm.model
    evidence = pair["gold_context_sources"][0]["evidence"]
    assert max(quoted_share(evidence, c) for c in chunks.text) >= 0.8  # quoted from the corpus
    rerun = generate_qa(contexts, llm, n=nb["N_PAIRS"], chunks=chunks, seed=nb["SEED"], config=config)
    assert rerun.attempts.cached.all() and [p["question"] for p in rerun.pairs] == [p["question"] for p in run.pairs]


@pytest.mark.model
def test_a_broken_model_file_fails_with_the_servers_words(tmp_path):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF not really")
    with pytest.raises(LLMError, match="died while starting: exit code") as info:
        LocalServer(model=bad, startup_timeout=60).start()
    assert info.value.cause == "server-died"


@pytest.mark.model
def test_the_server_keeps_only_the_logits_a_completion_reads_with_the_same_values():
    """fabnb.models._llama_server's eval asks llama.cpp for each call's last row only: the rows a completion's
    log-probabilities read equal those of llama-cpp-python's own eval bit for bit, and the prompt's other rows are
    never filled (1 MB each with Gemma's vocabulary)."""
    import numpy as np
    from llama_cpp import Llama

    import fabnb.models._llama_server as patched
    from fabnb.models.local import model_path

    model = Llama(str(model_path()), n_ctx=256, n_batch=16, logits_all=True, verbose=False, seed=0)
    prompt = model.tokenize(b"Plasma etching removes silicon from the wafer where the mask leaves it open, and " * 3)
    generated = [236761, 506, 1345]  # then three tokens, one call each, as a completion evaluates them
    rows = {}
    for name, run in (("theirs", patched._original_eval), ("ours", patched.eval_keeping_last_rows)):
        model.reset()
        model.scores[:] = np.nan
        run(model, prompt)
        for token in generated:
            run(model, [token])
        rows[name] = model.scores[:model.n_tokens].copy()
    n = len(prompt)
    assert n > 2 * 16  # the prompt spans several batches
    read = slice(n - 1, n + len(generated))  # what Llama._create_completion reads without echo
    assert np.array_equal(rows["ours"][read], rows["theirs"][read])  # bit for bit (measured)
    assert np.isnan(rows["ours"][:n - 1]).all() and np.isfinite(rows["theirs"][:n - 1]).all()
    assert Llama.eval is patched.eval_keeping_last_rows


@pytest.mark.model
def test_logprobs_rows_computed_when_read_equal_llama_cpps_own():
    """fabnb.models._llama_server computes log-probabilities row by row when read: the same values, less memory."""
    import numpy as np
    from llama_cpp import Llama

    import fabnb.models._llama_server as patched

    logits = np.random.default_rng(0).normal(size=(40, 300)).astype(np.single)
    full = patched._original(logits)
    lazy = Llama.logits_to_logprobs(logits)  # the server module replaced it on import
    assert isinstance(lazy, patched.RowLogprobs) and len(lazy) == 40
    assert np.array_equal(np.stack(list(lazy[7:])), full[7:]) and np.array_equal(lazy[3], full[3])
    assert np.array_equal(Llama.logits_to_logprobs(logits[5]), full[5])  # 1-D calls are unchanged


@pytest.mark.model
def test_a_grammar_checks_the_token_the_chain_picked_with_the_same_greedy_tokens_and_only_allowed_ones():
    """fabnb.models._llama_server's grammar checks the chain's pick and filters every token only when it refuses it
    (14.8 -> 33.3 tokens/s in benchmarks/bench_local_build.py): a greedy call gives llama-cpp-python's
    own tokens, and at a temperature every reply keeps to the grammar, through refusals and resampling."""
    import re

    import llama_cpp
    from llama_cpp import Llama, LlamaGrammar
    from llama_cpp import llama as llama_module

    import fabnb.models._llama_server as patched
    from fabnb.models.local import model_path

    model = Llama(str(model_path()), n_ctx=512, verbose=False, seed=0)
    schema = {"type": "object", "properties": {"question": {"type": "string", "maxLength": 200},
                                               "keywords": {"type": "array", "items": {"type": "string"},
                                                            "minItems": 1, "maxItems": 3}},
              "required": ["question", "keywords"]}
    prompt = model.tokenize(b"Write one question about plasma etching. Reply with JSON: question, keywords.\n\nJSON:")

    def tokens(init, grammar: LlamaGrammar, temp: float, n: int = 80) -> list[int]:
        model.reset()  # no prefix reuse: a reused prefix changes the logits' last bits
        llama_module.Llama._init_sampler = init
        try:
            out = []
            for token in model.generate(prompt, temp=temp, grammar=grammar):
                if llama_cpp.llama_vocab_is_eog(model._model.vocab, token):
                    break
                out.append(token)
                if len(out) == n:
                    break
            return out
        finally:
            llama_module.Llama._init_sampler = patched.init_sampler_grammar_last

    def grammar():
        return LlamaGrammar.from_json_schema(json.dumps(schema), verbose=False)

    theirs = tokens(patched._original_init_sampler, grammar(), 0.0)
    ours = tokens(patched.init_sampler_grammar_last, grammar(), 0.0)
    assert ours == theirs and len(ours) > 10
    checks = []
    allows = patched.GrammarLastSampler.allows

    def recording(self, token):
        checks.append(allows(self, token))
        return checks[-1]

    digits = LlamaGrammar.from_string('root ::= "\\"" [0-9]+ "\\""', verbose=False)  # not what the prompt asks
    patched.GrammarLastSampler.allows = recording
    try:
        replies = [model.detokenize(tokens(patched.init_sampler_grammar_last, digits, 0.8, n=12)).decode()
                   for _ in range(2)]
    finally:
        patched.GrammarLastSampler.allows = allows
    assert all(re.fullmatch(r'"[0-9]+"?', r) for r in replies), replies
    assert False in checks and True in checks  # the chain's pick refused, so resampled; and kept where allowed


def test_the_reinstall_line_installs_the_local_extra_with_its_dependencies():
    """Once the printed fix looped: ``--no-deps`` never installed the server's own dependencies (uvicorn, ...)."""
    import shlex
    import tomllib

    from fabnb.models.local import LOCAL_REQUIREMENTS

    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["local"]
    assert list(LOCAL_REQUIREMENTS) == extra  # the line is made from the pins pyproject.toml installs
    rebuild, complete = PORTABLE_INSTALL.split(" && ")
    assert rebuild.startswith('CMAKE_ARGS="-DGGML_NATIVE=OFF" pip install --no-cache-dir --force-reinstall --no-deps')
    assert shlex.split(rebuild)[-1] == extra[0].replace("[server]", "")  # llama.cpp alone, rebuilt portably
    words = shlex.split(complete)
    assert words[:3] == ["pip", "install", "--no-cache-dir"] and "--no-deps" not in words
    assert words[3:] == extra  # then every package of the extra, with its dependencies


def test_the_renamed_model_keeps_the_cache_keys_it_had():
    """The alias now names the base model; replies cached under the former name are still found."""
    from fabnb.models.local import FORMER_ALIAS, MODEL_ALIAS, EmbeddedLLM

    assert MODEL_ALIAS == "gemma-3-270m-q4_k_m" and FORMER_ALIAS == "gemma-3-270m-it-q4_k_m"
    identity = f"embedded:{FORMER_ALIAS}:alpaca"
    now = EmbeddedLLM(MODEL_ALIAS, "http://127.0.0.1:9/v1", cache=False, cache_as=identity)
    key_now = now._prepare("Say OK.", {"max_tokens": 4})[2]
    old = EmbeddedLLM(FORMER_ALIAS, "http://127.0.0.1:8/v1", cache=False, cache_as=identity)  # the old release
    assert key_now == old._prepare("Say OK.", {"max_tokens": 4})[2]


def _wheel_of(project: str, folder: Path) -> Path:
    """The installed distribution ``project`` packed back into a wheel in ``folder`` (its files as installed,
    RECORD written anew): the suite's own portable llama.cpp build, so that the reinstall test compiles nothing."""
    import base64
    import hashlib
    import zipfile
    from importlib.metadata import distribution

    dist = distribution(project)
    base = Path(dist.locate_file(""))
    info = next(str(f).split("/")[0] for f in dist.files if str(f).endswith(".dist-info/WHEEL"))
    tag = next(line.split(": ")[1] for line in dist.read_text("WHEEL").splitlines() if line.startswith("Tag: "))
    keep = [str(f) for f in dist.files if not str(f).startswith("..") and "__pycache__" not in str(f)
            and str(f).split("/")[-1] not in ("RECORD", "INSTALLER", "direct_url.json")]
    wheel = folder / f"{info.removesuffix('.dist-info')}-{tag}.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        record = []
        for name in keep:
            data = (base / name).read_bytes()
            z.writestr(name, data)
            sha = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            record.append(f"{name},sha256={sha},{len(data)}\n")
        z.writestr(f"{info}/RECORD", "".join(record) + f"{info}/RECORD,,\n")
    return wheel


@pytest.mark.model
def test_the_reinstall_line_leads_from_each_state_to_a_server_that_answers(tmp_path):
    """Issue 27: the line ``fabnb doctor`` and the errors print, run for real in a new virtual environment taken
    through three states: no llama-cpp-python, a build whose server's dependencies are missing, and a build that
    cannot load (a stand-in for a native build, whose ``import`` fails as SIGILL would). After each, llama.cpp is
    the portable build and its server starts and answers on the Gemma model. Compiling is replaced by the suite's
    own portable build packed into a wheel (``PIP_FIND_LINKS``; pip takes a wheel over the same version's sdist).
    Checked by breaking it twice: with ``--no-deps`` on the line's second half, the first state failed
    (``typing_extensions`` missing); without ``--force-reinstall``, the third (the build that cannot load stayed)."""
    import subprocess
    import sysconfig

    import llama_cpp

    from fabnb.models.local import model_path

    links = tmp_path / "links"
    links.mkdir()
    assert _wheel_of("llama_cpp_python", links).name.startswith(f"llama_cpp_python-{llama_cpp.__version__}-")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    env = {**os.environ, "PATH": f"{venv / 'bin'}:{os.environ['PATH']}", "PIP_FIND_LINKS": str(links),
           "PIP_DISABLE_PIP_VERSION_CHECK": "1", "VIRTUAL_ENV": str(venv)}
    env.pop("PYTHONPATH", None)
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['platlib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    ours = Path(sysconfig.get_paths()["platlib"]) / "llama_cpp" / "lib"
    server_check = "import llama_cpp, llama_cpp.server.app, uvicorn, fastapi, sse_starlette, starlette_context"

    def imports() -> subprocess.CompletedProcess:
        return subprocess.run([str(python), "-c", server_check], env=env, capture_output=True, text=True)

    def reinstall_and_check(state: str) -> None:
        done = subprocess.run(["bash", "-c", PORTABLE_INSTALL], env=env, capture_output=True, text=True)
        assert done.returncode == 0, (state, done.stderr[-2000:])
        assert imports().returncode == 0, (state, imports().stderr[-1500:])
        for lib in ours.glob("*.so*"):  # the portable build, byte for byte
            assert (site / "llama_cpp" / "lib" / lib.name).read_bytes() == lib.read_bytes(), (state, lib.name)
        server = LocalServer(model=model_path(), command=[str(python), "-m", "llama_cpp.server"], n_ctx=512)
        try:
            reply = server.start().llm(cache=False).complete([{"role": "user", "content": "Say OK."}],
                                                              max_tokens=2)
        finally:
            server.stop()
        assert reply.text is not None, state

    assert imports().returncode != 0  # state 1: no llama-cpp-python at all
    reinstall_and_check("no llama-cpp-python")

    subprocess.run([str(python), "-m", "pip", "uninstall", "-q", "-y", "uvicorn", "fastapi", "sse-starlette",
                    "starlette-context"], env=env, check=True)
    assert "No module named" in imports().stderr  # state 2: the build without its server's dependencies
    reinstall_and_check("server dependencies missing")

    # state 3: pip sees llama-cpp-python installed at the pinned version, but it cannot load (as a native build
    # on a CPU without its instructions): only a forced reinstall replaces it.
    (site / "llama_cpp" / "__init__.py").write_text('raise ImportError("a build this CPU cannot run")\n')
    assert "cannot run" in imports().stderr  # state 3: a build that cannot load
    reinstall_and_check("a build that cannot load")
