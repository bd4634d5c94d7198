"""Does ``--provider cuda`` work on this machine? (run first on a GPU machine, before ``graphsub bench suite
--provider cuda``; see tools/dev/cuda_device.sh).

Prints onnxruntime's version and providers, runs a small MLP on the CUDA provider against the CPU one, and runs
``graphsub optimize --provider cuda`` on it; exits 1 on the first failure, with the reason.

    python tools/dev/cuda_smoke.py
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper


def mlp(path: Path) -> dict[str, np.ndarray]:
    """y = relu(x @ W + b) @ V + identity leftovers, [64, 256] -> [64, 256]; returns its feeds."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((256, 256)).astype(np.float32) * 0.05, "W"),
             numpy_helper.from_array(rng.standard_normal(256).astype(np.float32), "b"),
             numpy_helper.from_array(rng.standard_normal((256, 256)).astype(np.float32) * 0.05, "V")]
    nodes = [helper.make_node("MatMul", ["x", "W"], ["a"]), helper.make_node("Add", ["a", "b"], ["c"]),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("Identity", ["r"], ["i"]),
             helper.make_node("MatMul", ["i", "V"], ["y"])]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 256])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 256])], inits)
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=10), str(path))
    return {"x": rng.standard_normal((64, 256)).astype(np.float32)}


def main() -> int:
    print(f"python {sys.version.split()[0]}; onnxruntime {ort.__version__} from {Path(ort.__file__).parent}")
    print(f"providers: {ort.get_available_providers()}; device: {ort.get_device()}")
    from graphsub.errors import GraphsubError
    from graphsub.frontends.ort import make_session, require_provider

    try:
        require_provider("cuda")
    except GraphsubError as e:
        print(f"FAIL require_provider: {e}")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "mlp.onnx"
        feeds = mlp(src)
        try:
            t = time.perf_counter()
            sess = make_session(str(src), optimization="all", threads=1, provider="cuda")
            made = time.perf_counter() - t
            got = sess.run(None, feeds)[0]
            print(f"cuda session: {sess.get_providers()} (made in {made:.2f} s)")
        except Exception as e:  # report whatever onnxruntime raised (missing CUDA/cuDNN libraries, ...)
            print(f"FAIL cuda session: {type(e).__name__}: {e}")
            return 1
        want = make_session(str(src), optimization="all", threads=1).run(None, feeds)[0]
        err = float(np.abs(got - want).max())
        print(f"cuda vs cpu max abs diff: {err:.2e}")
        if not err < 1e-2:
            print("FAIL: the CUDA provider disagrees with the CPU one")
            return 1
        from graphsub.optimize import optimize
        from graphsub.search import Budget

        t = time.perf_counter()
        res = optimize(src, output=Path(tmp) / "out.onnx", budget=Budget(time_s=3), seed=0, provider="cuda",
                       peers="none")
        print(f"graphsub optimize --provider cuda: {res.decision} (provider {res.provider}, "
              f"{time.perf_counter() - t:.1f} s, verified {res.verified})")
        if res.provider != "cuda" or not res.verified:
            print("FAIL: graphsub optimize --provider cuda")
            return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
