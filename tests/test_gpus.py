"""Several GPUs of one node without a GPU (attnprof.measure.gpus): discovery from stand-in nvidia-smi answers, the
CUDA_VISIBLE_DEVICES and config choices, the per-UUID claim and lock shared by every user, the assignment of parallel
capture jobs to free GPUs, and the check that a capture process sees the GPU its job holds."""
import multiprocessing
import os
import stat
import time
import types
from pathlib import Path

import pytest

from attnprof.measure import gpus as g
from attnprof.model import gpus as m
from attnprof.measure.lock import capture_lock_path, device_lock, gpu_file, open_shared

A, B, C = ("GPU-aaaa1111-0000-0000-0000-000000000000", "GPU-aaaa2222-0000-0000-0000-000000000000",
           "GPU-cccc3333-0000-0000-0000-000000000000")
# a node of three: two H200 at 700 W and one capped at 500 W (nvidia-smi's csv,noheader,nounits; [N/A] where unknown)
SMI = (f"0, {A}, NVIDIA H200, 700.00, 1980, 143771\n"
       f"1, {B}, NVIDIA H200, 700.00, 1980, 143771\n"
       f"2, {C}, NVIDIA H200, 500.00, [N/A], 143771\n")
NODE = m.parse_nvidia_smi(SMI)


def test_nvidia_smis_answer_is_read_field_by_field_and_a_line_of_another_format_is_named():
    assert [(x.index, x.uuid, x.name) for x in NODE] == [(0, A, "NVIDIA H200"), (1, B, "NVIDIA H200"), (2, C, "NVIDIA H200")]
    assert (NODE[0].power_limit_w, NODE[0].max_sm_clock_mhz, NODE[0].memory_mib) == (700.0, 1980.0, 143771.0)
    assert NODE[2].max_sm_clock_mhz is None  # [N/A]
    with pytest.raises(ValueError, match="line 2 .*NVIDIA H200"):
        m.parse_nvidia_smi(f"0, {A}, NVIDIA H200, 700, 1980, 1\nNVIDIA H200\n")


@pytest.mark.parametrize("variable,expected", [
    (None, [A, B, C]),                       # unset: every GPU
    ("2,0", [C, A]),                         # indices, in the variable's order
    (f"{B},{A}", [B, A]),                    # full UUIDs
    ("GPU-cccc,aaaa1", [C, A]),              # unique prefixes, with and without GPU-
    ("1,7,0", [B]),                          # CUDA reads up to the first entry that names no GPU
    ("aaaa,2", []),                          # an ambiguous prefix is such an entry
    ("0,0", [A]),                            # so is a repeat
    ("", []), ("-1", []),                    # no GPU
])
def test_cuda_visible_devices_is_read_as_cuda_reads_it(variable, expected):
    assert [x.uuid for x in m.visible_gpus(NODE, variable)] == expected


def test_a_mig_instance_is_a_device_of_its_own_whose_model_is_not_known_here():
    (mig,) = m.visible_gpus(NODE, "MIG-1234-5678,MIG-1234-5678")  # listed twice: once
    assert (mig.uuid, mig.index, mig.name) == ("MIG-1234-5678", -1, "")


def test_nvidia_smi_saying_in_words_that_there_is_no_gpu_is_no_gpu(monkeypatch):
    for words in ("No devices were found\n", "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", ""):
        monkeypatch.setenv(g.STANDIN_ENV, words)
        assert g.node_gpus() == []
    from attnprof.measure.env import detect_gpu

    assert detect_gpu() is None  # not the message read as a GPU's name


def test_the_config_chooses_among_the_visible_gpus_by_index_or_uuid():
    visible = m.visible_gpus(NODE, "2,1")  # cuda:0 is C, cuda:1 is B
    assert m.select_gpus(visible, "all") == visible
    assert [x.uuid for x in m.select_gpus(visible, [1])] == [B]  # an index into the visible ones, as cuda:1
    assert [x.uuid for x in m.select_gpus(visible, ["gpu-CCCC", 1])] == [C, B]  # a prefix, any case
    with pytest.raises(ValueError, match=r"gpus: 2 names no visible GPU; the visible GPUs are 0: GPU-cccc3333.*1: GPU-aaaa2222"):
        m.select_gpus(visible, [2])
    with pytest.raises(ValueError, match=r"'GPU-aaaa1111' names no visible GPU"):  # on the node, but not visible
        m.select_gpus(visible, ["GPU-aaaa1111"])
    with pytest.raises(ValueError, match="names 2 GPUs"):
        m.select_gpus(NODE, ["aaaa"])
    with pytest.raises(ValueError, match="a second time"):
        m.select_gpus(NODE, [0, A])


def test_the_run_takes_its_gpus_from_the_stand_in_nvidia_smi_and_the_environment(monkeypatch):
    monkeypatch.setenv(g.STANDIN_ENV, SMI)
    assert [x.uuid for x in g.run_gpus("all", {"CUDA_VISIBLE_DEVICES": "1,2"})] == [B, C]
    assert [x.uuid for x in g.run_gpus([1], {"CUDA_VISIBLE_DEVICES": "1,2"})] == [C]
    assert [x.uuid for x in g.run_gpus("all", {})] == [A, B, C]
    assert g.pinned_environ(NODE[1], {"X": "1"}) == {"X": "1", "CUDA_VISIBLE_DEVICES": B}


def test_gpus_of_another_kind_are_named_and_alike_ones_are_not():
    assert m.differing_kinds([x.as_dict() for x in NODE[:2]]) == []
    assert m.differing_kinds([x.as_dict() for x in NODE]) == [f"NVIDIA H200, 700 W, 1980 MHz: {A}, {B}",
                                                              f"NVIDIA H200, 500 W, ? MHz: {C}"]


def test_the_lock_and_the_claim_of_a_gpu_are_named_by_its_uuid_and_shared_by_every_user(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNPROF_CAPTURE_LOCK_DIR", str(tmp_path))
    path = capture_lock_path("cuda", A)
    assert path == tmp_path / f"attnprof-gpu-{A}.lock"  # no user id in it
    old = os.umask(0o077)  # a user whose umask would keep every other user out
    try:
        with device_lock("cuda", A):
            assert path.exists()  # the lock is this GPU's file
        with g.claim_gpu([NODE[0]], tmp_path):
            pass
    finally:
        os.umask(old)
    for f in (path, gpu_file(A, "claim", tmp_path)):
        assert stat.S_IMODE(f.stat().st_mode) == 0o666, f
    # without a UUID (a CPU run): one lock per user and device kind, as before
    assert capture_lock_path("cpu") == tmp_path / f"attnprof-capture-{os.getuid()}-cpu.lock"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as two users")
def test_another_users_claim_file_is_used_as_it_is_and_a_missing_folder_is_named(tmp_path, request):
    """A claim file made by another user (here root, mode 0644 as an older umask left it) in a sticky folder: a
    second user (nobody) opens it read-only and holds the flock, instead of failing on O_CREAT (Linux's
    fs.protected_regular refuses O_CREAT on another user's file there, whatever its mode)."""
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="attnprof-test-locks-", dir="/tmp"))  # a folder nobody can reach, as /tmp
    request.addfinalizer(lambda: shutil.rmtree(folder, ignore_errors=True))
    os.chmod(folder, 0o1777)
    claim = gpu_file(A, "claim", folder)
    claim.write_text("")
    os.chmod(claim, 0o644)
    import fcntl

    pid = os.fork()
    if pid == 0:  # the other user: open, flock, report by the exit status (0: held, read-only)
        code = 1
        try:
            os.setuid(65534)
            fh = open_shared(claim)
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
            code = 0 if fh.mode == "r" else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    with pytest.raises(RuntimeError, match=r"its folder .*/nope does not exist"):
        open_shared(gpu_file(A, "claim", tmp_path / "nope"))


def _hold(uuids, folder, hold_s, out, go=None):
    gpus = [m.Gpu(i, u, "stand-in") for i, u in enumerate(uuids)]
    if go is not None:
        go.wait(60)  # every job started: they ask for a GPU at once, as Snakemake's jobs of one round do
    with g.claim_gpu(gpus, folder, poll_s=0.02) as gpu:
        t0 = time.time()
        time.sleep(hold_s)
        out.put((gpu.uuid, t0, time.time()))


@pytest.mark.slow
def test_parallel_capture_jobs_each_take_a_free_gpu_and_never_share_one(tmp_path):
    """Six jobs at once on two stand-in GPUs, each holding its GPU 1 s (processes, as Snakemake's jobs are): at
    most one job per GPU at any time, both GPUs used, and the six done in three turns of two, not six of one."""
    ctx = multiprocessing.get_context("spawn")
    out, go = ctx.Queue(), ctx.Event()
    jobs = [ctx.Process(target=_hold, args=([A, B], str(tmp_path), 1.0, out, go)) for _ in range(6)]
    for j in jobs:
        j.start()
    go.set()
    spans = [out.get(timeout=60) for _ in jobs]
    for j in jobs:
        j.join(30)
    assert {u for u, _, _ in spans} == {A, B}
    for uuid in (A, B):
        mine = sorted((s, e) for u, s, e in spans if u == uuid)
        assert all(prev[1] <= nxt[0] for prev, nxt in zip(mine, mine[1:])), mine  # never two on one GPU
    # every moment of the busiest stretch had two jobs running: the sum of holds is twice the stretch, not once
    start, end = min(s for _, s, _ in spans), max(e for _, _, e in spans)
    assert sum(e - s for _, s, e in spans) > 1.5 * (end - start)


def test_a_job_waits_for_a_gpu_held_by_another_run_and_says_so(tmp_path):
    """The one GPU is held (by another run: a claim is a flock, so another process or file handle is alike): the job
    says once that it waits, and takes the GPU when it is released."""
    import threading

    said, got = [], []

    def job():
        with g.claim_gpu([NODE[0]], tmp_path, poll_s=0.01, say=said.append) as gpu:
            got.append((gpu.uuid, time.time()))

    with g.claim_gpu([NODE[0]], tmp_path):
        t = threading.Thread(target=job)
        t.start()
        time.sleep(0.3)
        assert not got and said == ["all 1 GPUs of the run are busy with other captures: waiting for one"]
        released = time.time()
    t.join(10)
    assert got and got[0][0] == A and got[0][1] >= released and len(said) == 1


def test_a_job_on_one_gpu_takes_it_without_a_claim_and_a_cpu_job_has_none(tmp_path, monkeypatch):
    monkeypatch.setenv(g.STANDIN_ENV, SMI)
    monkeypatch.setenv("ATTNPROF_CAPTURE_LOCK_DIR", str(tmp_path))
    with g.job_gpu("cpu") as gpu:
        assert gpu is None
    with g.job_gpu("cuda", [B]) as gpu:
        assert gpu.uuid == B and not gpu_file(B, "claim", tmp_path).exists()
    with g.job_gpu("cuda", [A, B]) as first, g.job_gpu("cuda", [A, B]) as second:
        assert (first.uuid, second.uuid) == (A, B)  # the first is held: the next job takes the other
    assert g.gpu_choice(types.SimpleNamespace(gpu_choice=f"{A},{B}")) == [A, B]
    assert g.gpu_choice(types.SimpleNamespace()) == "all"
    # under a cluster executor ('any'): the job's own allocation, whatever the run saw at parse time
    slurm = types.SimpleNamespace(gpu_choice="any")
    assert g.gpu_choice(slurm) == "any" and g.per_job_allocation(slurm)
    with g.job_gpu("cuda", "any") as gpu:
        assert gpu is None  # taken as CUDA gives it: nothing pinned, nothing claimed
    assert not g.per_job_allocation(types.SimpleNamespace(gpu_choice=A))


def test_a_capture_process_that_sees_another_gpu_than_its_job_holds_is_refused(monkeypatch):
    import torch

    from attnprof.measure.capture import gpu_record

    props = types.SimpleNamespace(uuid="aaaa2222-0000-0000-0000-000000000000", name="NVIDIA H200")
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: props)
    rec, why = gpu_record(NODE[1].as_dict())  # B: what cuda:0 is
    assert why is None and rec["uuid"] == B and rec["torch_uuid"] == props.uuid
    rec, why = gpu_record(NODE[0].as_dict())  # the job holds A
    assert why.startswith(f"the capture's job holds GPU {A}") and "GPU-aaaa2222" in why
    rec, why = gpu_record(None)  # no assignment (a cluster job, CUDA without nvidia-smi): the GPU as torch names it
    assert why is None and rec == {"uuid": "GPU-aaaa2222-0000-0000-0000-000000000000", "name": "NVIDIA H200",
                                   "torch_uuid": props.uuid, "torch_name": "NVIDIA H200"}


# --- what the result set keeps and the report says --------------------------------------------------------------

def test_the_summary_names_the_gpus_each_variants_repeats_ran_on():
    """From the capture records (status.json gpu) through the per-capture rows (repeats.csv gpu_uuid, gpu_name) to the
    summary's gpus: each GPU once, in UUID order, whatever the repeats' order."""
    import pandas as pd

    from attnprof.analysis.tables import FORWARD_COLUMNS, REPEAT_COLUMNS, combine_repeats, summary_row

    def row(repeat, gpu):
        status = {"variant": "sdpa_cudnn", "shape_key": "s", "status": "unsupported", "reason": "r", "device": "cuda",
                  **({"gpu": gpu.as_dict()} if gpu else {})}
        return {**summary_row(status, pd.DataFrame(columns=FORWARD_COLUMNS)), "repeat": repeat}

    rows = [row(3, NODE[1]), row(1, NODE[0]), row(2, NODE[1])]
    assert [(r["gpu_uuid"], r["gpu_name"]) for r in rows] == [(B, "NVIDIA H200"), (A, "NVIDIA H200"), (B, "NVIDIA H200")]
    assert {"gpu_uuid", "gpu_name"} <= set(REPEAT_COLUMNS)
    assert combine_repeats(rows)["gpus"] == f"{A};{B}"
    assert combine_repeats([row(1, None)])["gpus"] is None  # a CPU run's, or one made before GPUs were recorded


def test_page_one_says_on_how_many_gpus_and_whether_they_are_alike():
    """The GPUs come from the capture records (repeats.csv), not env.json: a later run may have rewritten that."""
    import pandas as pd

    from attnprof.model.formats import current_table
    from attnprof.findings.brief import brief_notes, gpu_note, gpus_used

    def repeats(*gpus):
        return pd.DataFrame([{"variant": "v", "repeat": k, "gpu_uuid": x.uuid, "gpu_name": x.name,
                              "gpu_power_limit_w": x.power_limit_w, "gpu_max_sm_clock_mhz": x.max_sm_clock_mhz}
                             for k, x in enumerate(gpus, 1)])

    used = gpus_used(repeats(NODE[2], NODE[0], NODE[1], NODE[0]))
    assert [x["uuid"] for x in used] == [A, B, C]
    note = gpu_note(used)
    assert note.startswith("Captured on 3 GPUs of different kinds (NVIDIA H200, 700 W, 1980 MHz: ")
    assert f"500 W, ? MHz: {C}" in note and "compares across GPU kinds" in note
    alike = gpu_note(gpus_used(repeats(NODE[0], NODE[1])))
    assert alike.startswith("Captured on 2 GPUs, alike (NVIDIA H200, 700 W power limit, 1980 MHz highest SM clock)")
    # a GPU whose model is not known (a MIG instance; an older record): said, never called alike
    unknown = gpu_note(gpus_used(repeats(NODE[0], m.Gpu(-1, "MIG-x", ""))))
    assert "do not say what some of them are" in unknown
    assert gpu_note(gpus_used(repeats(NODE[0], NODE[0]))) is None  # one GPU: nothing to say
    # a repeats.csv of format 1 without the GPU columns (read as the current format: empty), and none at all
    older = current_table("repeats", pd.DataFrame({"variant": ["v"]}), "repeats.csv")
    assert gpus_used(older) == [] and gpus_used(None) == []
    # alike: page 1's small print leads with them; of different kinds: a finding of page 1, not small print
    summary = pd.DataFrame({"variant": ["v"], "shape_key": ["s"]})
    assert brief_notes(None, [], summary, gpus_used(repeats(NODE[0], NODE[1])))[0] == alike
    assert not any(n.startswith("Captured on") for n in brief_notes(None, [], summary, used))
    # an empty cell (NaN) is "not known" on both sides, not a kind of its own
    assert m.differing_kinds([{"uuid": A, "name": "H", "power_limit_w": float("nan")},
                              {"uuid": B, "name": "H", "power_limit_w": None}]) == []


def test_a_capture_on_a_gpu_model_the_run_does_not_list_is_refused_and_one_it_lists_is_not():
    from attnprof.analysis.records import RecordError, check_capture_record

    env = {"device": "cuda", "torch": "2.11", "gpu_name": "NVIDIA H200",
           "gpus": [NODE[0].as_dict(), {**NODE[1].as_dict(), "name": "NVIDIA H100 80GB HBM3"}]}
    record = {"variant": "naive", "shape_key": "b1", "repeat": 1, "device": "cuda", "torch_version": "2.11",
              "status": "ok", "gpu": {"uuid": B}}
    # on the run's second GPU, of another model than env.json's gpu_name (its first): a capture of this run
    check_capture_record({**record, "device_name": "NVIDIA H100 80GB HBM3"}, "s.json", None, env)
    with pytest.raises(RecordError, match=r"device_name 'NVIDIA A100-SXM4-80GB' but env.json lists the run's GPUs as "
                                          r"'NVIDIA H200' and 'NVIDIA H100 80GB HBM3' \(gpus\)"):
        check_capture_record({**record, "device_name": "NVIDIA A100-SXM4-80GB"}, "s.json", None, env)
    # a result set made before the GPUs were listed: gpu_name decides, as before
    old = {k: v for k, v in env.items() if k != "gpus"}
    with pytest.raises(RecordError, match="says gpu_name 'NVIDIA H200'"):
        check_capture_record({**record, "device_name": "NVIDIA H100 80GB HBM3"}, "s.json", None, old)


def test_gpus_of_two_models_make_no_one_result_set():
    t4 = m.Gpu(0, "GPU-7474", "Tesla T4", 70, 1590, 15360)
    why = m.mixed_models([t4, NODE[0], NODE[1]])
    assert why.startswith(f"gpus: the chosen GPUs are of 2 models (Tesla T4: GPU-7474; NVIDIA H200: {A}, {B})")
    assert "fix: choose the GPUs of one model" in why
    assert m.mixed_models(NODE) is None  # one model, two power limits: allowed, said on page 1
    assert m.mixed_models([NODE[0], m.Gpu(-1, "MIG-1", "")]) is None  # a MIG instance's model is not known


def test_the_capture_priority_keeps_rounds_and_puts_process_ending_captures_last_in_each():
    """Rounds of 3, two environments (ABBA): sorted by the priority (Snakemake: higher first), the captures of round k
    all come before round k + 1, the environments alternate A,B then B,A, and within each (round, environment) the
    captures that end their process come last. Expected order written out by hand."""
    from attnprof.model.config import capture_rank

    jobs = [(r, env, ends) for r in (1, 2) for env in ("a", "b") for ends in (True, False)]
    order = sorted(jobs, key=lambda j: -capture_rank(j[0], j[1], ["a", "b"], 3, j[2]))
    assert order == [(1, "a", False), (1, "a", True), (1, "b", False), (1, "b", True),
                     (2, "b", False), (2, "b", True), (2, "a", False), (2, "a", True)]
    single = sorted([(2, False), (1, True), (1, False)], key=lambda j: -capture_rank(j[0], None, [], 2, j[1]))
    assert single == [(1, False), (1, True), (2, False)]


# --- edges a mutation run of model/gpus.py and measure/gpus.py found untested ----------------------------------

def test_nvidia_smi_lines_of_another_shape_are_named_and_blank_ones_skipped():
    assert len(m.parse_nvidia_smi(SMI + "   \n\n")) == 3
    for bad in (f"0, {A}, H, 1, 2, 3, 4", f"0, {A}, H, 1, 2", f"x, {A}, H, 1, 2, 3"):  # 7 fields, 5, no index
        with pytest.raises(ValueError, match="nvidia-smi line 1 is not 'index,uuid,name"):
            m.parse_nvidia_smi(bad)


@pytest.mark.parametrize("variable,node,expected", [
    ("0, 2", NODE, [A, C]),                                  # spaces after the commas
    ("mig-1", NODE, ["mig-1"]),                              # MIG in any case
    ("MIG-a,MIG-b,0", NODE, ["MIG-a", "MIG-b", A]),          # a MIG entry does not end the list
    ("", NODE[:1], []),                                      # empty: no GPU, also on a node of one
])
def test_more_cuda_visible_devices_edges(variable, node, expected):
    assert [x.uuid for x in m.visible_gpus(node, variable)] == expected


@pytest.mark.parametrize("choice,error", [([True], "names no visible GPU"), ([-1], "names no visible GPU"),
                                          ([""], "names no visible GPU"), (["GPU-"], "names no visible GPU")])
def test_a_bool_a_negative_index_or_an_empty_name_names_no_gpu(choice, error):
    with pytest.raises(ValueError, match=error):
        m.select_gpus(NODE[:1], choice)
    with pytest.raises(ValueError, match="the visible GPUs are none"):
        m.select_gpus([], choice)


def test_one_name_where_a_list_is_wanted_is_taken_as_a_list_of_one():
    assert m.select_gpus(NODE, A) == [NODE[0]]


def test_kinds_are_compared_by_integer_power_limits_too_and_an_empty_name_is_no_name():
    assert len(m.differing_kinds([{"uuid": A, "name": "H", "power_limit_w": 700},
                                  {"uuid": B, "name": "H", "power_limit_w": 500}])) == 2  # ints, as read from a csv
    assert m.differing_kinds([{"uuid": A, "name": ""}, {"uuid": B}]) == []


def test_the_real_nvidia_smi_path_reads_its_answer_and_a_failing_or_missing_one_is_no_gpu(tmp_path, monkeypatch):
    monkeypatch.delenv(g.STANDIN_ENV, raising=False)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    monkeypatch.setenv("PATH", str(bin_dir))
    assert g.node_gpus() == []  # no nvidia-smi at all
    smi.write_text(f"#!/bin/sh\nprintf '{SMI}'\n")
    smi.chmod(0o755)
    assert [x.uuid for x in g.node_gpus()] == [A, B, C]
    smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed because it could not communicate with the driver'\nexit 9\n")
    assert g.node_gpus() == []
    smi.write_text("#!/bin/sh\necho 'No devices were found'\n")  # exit 0, words only
    assert g.node_gpus() == []
    smi.write_text("#!/no/such/interpreter\n")  # it cannot even start (OSError)
    assert g.node_gpus() == []
    smi.write_text(f"#!/bin/sh\nprintf '{SMI}'\n")
    monkeypatch.setenv(g.STANDIN_ENV, "")  # a stand-in that says: no GPU, whatever nvidia-smi would say
    assert g.node_gpus() == []
    monkeypatch.setenv(g.STANDIN_ENV, " " + SMI + "\n\n")  # the stand-in wins over nvidia-smi; padding is no matter
    assert len(g.node_gpus()) == 3


def test_the_environment_given_is_read_not_this_processs_and_the_pin_wins_over_an_inherited_value(monkeypatch):
    monkeypatch.setenv(g.STANDIN_ENV, SMI)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert [x.uuid for x in g.run_gpus()] == [B]  # this process's
    assert [x.uuid for x in g.run_gpus("all", {})] == [A, B, C]  # the one given: nothing hidden
    assert g.pinned_environ(NODE[2], {"CUDA_VISIBLE_DEVICES": "0"})["CUDA_VISIBLE_DEVICES"] == C


def test_claim_and_lock_names_stay_in_their_folder_and_an_empty_claim_is_refused(tmp_path):
    assert gpu_file("MIG-GPU-x/1/0", "claim", tmp_path) == tmp_path / "attnprof-gpu-MIG-GPU-x_1_0.claim"
    with pytest.raises(ValueError, match="no GPU to claim"), g.claim_gpu([], tmp_path):
        pass
    assert not g.per_job_allocation(types.SimpleNamespace())
