"""The profiler cross-check of DSL launches: the decision, TIRx kernel names, the wiring."""

from __future__ import annotations

from typing import Any

import pytest

from engine.grading.judge.breakdown import CallBreakdown
from engine.grading.judge.evidence import CallEvidence
from engine.grading.judge.kernel_audit import (
    MIN_DSL_SHARE,
    cross_check,
    cuda_kernel_names,
    profiled_kernel_names,
    work_split,
)
from engine.grading.judge.state import CallFigures, Evaluation
from engine.grading.options import EvalConfig
from engine.grading.runner import dsl_hooks
from engine.grading.runner.dsl_hooks import LaunchCounter
from engine.grading.runner.loop import Runner
from engine.grading.verdict import Rejected

TORCH_ADD = "void at::native::vectorized_elementwise_kernel<4, at::native::AddFunctor<float>>"
CUTE = "kernel_cutlass_rmsnorm_tensorptrf32_0"


def test_a_compiled_kernel_that_ran_confirms_the_launches() -> None:
    audit = cross_check({CUTE}, [TORCH_ADD, CUTE, CUTE], True, 2)
    assert audit["status"] == "confirmed" and audit["dsl_kernel_runs"] == 2


def test_the_profiler_may_print_a_signature_around_the_symbol() -> None:
    audit = cross_check({"main_kernel"}, [TORCH_ADD, "main_kernel(float*, float*)"], True, 1)
    assert audit["status"] == "confirmed"


def test_a_dsl_kernel_named_like_a_torch_kernel_does_not_claim_it() -> None:
    torch_kernel = "void at::native::elementwise_kernel<128, 2, at::native::MulFunctor<float>>"
    audit = cross_check({"elementwise_kernel"}, [TORCH_ADD, torch_kernel], True, 1)
    assert audit["status"] == "unconfirmed" and audit["dsl_kernel_runs"] == 0


CONTROL = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>"
CUBLAS = "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_cublas"
TORCH_REDUCE = "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>"


def test_the_work_split_leaves_out_the_control_and_sets_library_gemms_aside() -> None:
    names = [CONTROL, CUTE, CUBLAS, TORCH_REDUCE, "Memcpy DtoD (Device -> Device)"]
    work = work_split({CUTE}, names, [2.0, 60.0, 500.0, 30.0, 10.0])
    assert work == {
        "dsl_us": 60.0,
        "library_us": 500.0,
        "other_us": 40.0,
        "dsl_share": 0.6,
    }


@pytest.mark.parametrize(
    "durations",
    [None, [1.0, 2.0], [1.0, float("nan"), 3.0], [1.0, -2.0, 3.0], [1.0, "2", 3.0], [1, True, 3]],
)
def test_durations_that_are_not_times_give_no_split(durations) -> None:
    assert work_split({CUTE}, [CONTROL, CUTE, TORCH_ADD], durations) is None


def test_a_token_dsl_kernel_beside_torch_work_is_eager_work() -> None:
    audit = cross_check({CUTE}, [CONTROL, CUTE, TORCH_REDUCE, TORCH_ADD], True, 1, [2, 3, 400, 300])
    assert audit["status"] == "confirmed" and audit["work"]["dsl_share"] < MIN_DSL_SHARE


def test_counted_launches_without_a_dsl_kernel_are_unconfirmed() -> None:
    audit = cross_check({CUTE}, [TORCH_ADD, "void at::native::reduce_kernel<512>"], True, 1)
    assert audit["status"] == "unconfirmed" and audit["dsl_kernel_runs"] == 0


def test_a_profiler_that_misses_the_control_kernel_is_unavailable_not_a_cheat() -> None:
    assert cross_check({CUTE}, [], False, 1)["status"] == "unavailable"
    assert cross_check({CUTE}, None, False, 1)["status"] == "unavailable"


def test_without_compiled_names_only_the_count_is_reported() -> None:
    audit = cross_check(set(), [TORCH_ADD, "mystery"], True, 1)
    assert audit["status"] == "names_unknown" and TORCH_ADD in audit["observed_kernels"]


def test_tirx_kernel_names_come_from_the_generated_cuda_source() -> None:
    source = """
    extern "C" __global__ void __launch_bounds__(256) main_kernel(float* __restrict__ A) { }
    extern "C" __global__ void add_one_kernel0(half* B, int n) { }
    __device__ float helper(float x) { return x; }
    """
    assert cuda_kernel_names(source) == {"main_kernel", "add_one_kernel0"}


def test_the_profiler_is_unavailable_without_a_gpu() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present; the GPU validation covers the profiler")
    assert profiled_kernel_names(lambda: None) is None


def test_an_unknown_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="kernel_audit"):
        EvalConfig(kernel_audit="strict")


class _Channel:
    def __init__(self) -> None:
        self.sent: list[tuple[str, Any]] = []

    def send(self, kind: str, data: Any) -> None:
        self.sent.append((kind, data))


class _RunnerLink:
    """The judge's link to a real runner-side ``Runner.audit`` (no process in between)."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner

    def request(self, message: dict[str, Any], deadline: float) -> tuple[dict, list]:
        assert message == {"op": "audit"}
        return self.runner.audit(message), []


class _Judge(CallEvidence):
    """The judge's evidence checks with their evaluation's result at hand."""

    @property
    def result(self) -> dict:
        return self.evaluation.result


def _judge(mode: str) -> tuple[_Judge, LaunchCounter, _Channel]:
    """A judge on a pretend GPU whose runner's profiled call counts one hooked launch."""
    counter = LaunchCounter("cute", kernel_names={CUTE})
    runner = Runner.__new__(Runner)
    runner.cuda, runner.counter, runner.last_inputs = True, counter, []
    runner.solve = lambda: counter.record("cute")
    channel = _Channel()
    job = {"dsl": "cute", "kernel_audit": mode}
    evaluation = Evaluation(job, None, channel, cuda=True, scale="full", deadline=1e18)
    evaluation.runner = _RunnerLink(runner)  # type: ignore[assignment]
    figures = CallFigures(CallBreakdown(evaluation.result))
    judge = _Judge(evaluation, figures, call=None, check_anchor=None)  # type: ignore[arg-type]
    return judge, counter, channel


@pytest.fixture
def profiler_sees(monkeypatch: pytest.MonkeyPatch):
    def install(names: list[str], durations: list[float] | None = None) -> None:
        def fake(call):
            call()
            return names, durations or [1.0] * len(names), True

        monkeypatch.setattr(dsl_hooks, "profiled_kernel_names", fake)

    return install


def test_enforce_rejects_an_unconfirmed_launch(profiler_sees) -> None:
    profiler_sees([TORCH_ADD])
    judge, _, channel = _judge("enforce")
    with pytest.raises(Rejected) as caught:
        judge.audit_kernels()
    assert caught.value.code == "dsl.launch_unconfirmed"
    assert judge.result["kernel_audit"]["hooked_launches"] == 1
    assert ("phase", "kernel_audit") in channel.sent


def test_report_records_without_rejecting(profiler_sees) -> None:
    profiler_sees([TORCH_ADD])
    judge, _, _ = _judge("report")
    judge.audit_kernels()
    assert judge.result["kernel_audit"]["status"] == "unconfirmed"
    assert judge.result["kernel_audit"]["mode"] == "report"
    assert judge.result["flags"] == ["kernel_audit.unconfirmed"]  # for exclusion rules


def test_enforce_passes_a_confirmed_launch_and_off_skips_the_call(profiler_sees) -> None:
    profiler_sees([TORCH_ADD, CUTE])
    judge, _, _ = _judge("enforce")
    judge.audit_kernels()
    assert judge.result["kernel_audit"]["status"] == "confirmed"
    judge, counter, _ = _judge("off")
    judge.audit_kernels()
    assert "kernel_audit" not in judge.result and counter.count == 0


def test_report_mode_rejects_a_confirmed_call_whose_dsl_share_is_small(profiler_sees) -> None:
    profiler_sees([CONTROL, CUTE, TORCH_REDUCE], [2.0, 5.0, 95.0])
    judge, _, _ = _judge("report")
    judge.audit_kernels()
    assert judge.result["kernel_audit"]["work"]["dsl_share"] == 0.05
    with pytest.raises(Rejected) as caught:
        judge.check_work_share()
    assert caught.value.code == "dsl.eager_work" and "5%" in str(caught.value)


def test_a_dsl_kernel_doing_most_of_the_work_passes_the_share(profiler_sees) -> None:
    profiler_sees([CONTROL, CUTE, TORCH_REDUCE, CUBLAS], [2.0, 60.0, 40.0, 900.0])
    judge, _, _ = _judge("report")
    judge.audit_kernels()
    judge.check_work_share()
    assert judge.result["kernel_audit"]["work"]["library_us"] == 900.0


def test_confirmed_launches_with_junk_durations_break_the_protocol(monkeypatch) -> None:
    monkeypatch.setattr(
        dsl_hooks, "profiled_kernel_names", lambda call: ([CONTROL, CUTE], ["a", "b"], True)
    )
    judge, _, _ = _judge("report")
    with pytest.raises(Rejected) as caught:
        judge.audit_kernels()
    assert caught.value.code == "runner.protocol"


def test_the_bypass_verdict_comes_before_the_share(profiler_sees) -> None:
    profiler_sees([CONTROL, CUTE, TORCH_REDUCE], [2.0, 5.0, 95.0])
    judge, _, _ = _judge("report")
    judge.figures.launches = [1]
    judge.evaluation.job["dsl_checks"] = True
    judge.bypass_test = lambda: "still_valid"  # type: ignore[method-assign]
    with pytest.raises(Rejected) as caught:
        judge.launch_evidence()
    assert caught.value.code == "dsl.bypass_still_valid"
    judge.bypass_test = lambda: "outputs_failed"  # type: ignore[method-assign]
    with pytest.raises(Rejected) as caught:
        judge.launch_evidence()
    assert caught.value.code == "dsl.eager_work"
