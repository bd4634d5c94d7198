"""Frontends: the one home of ONNX, onnxruntime and PyTorch conversion -- ONNX import (:mod:`.onnx_import`, facade
:mod:`.onnx_io`) and export (:mod:`.onnx_export`), onnxruntime sessions (:mod:`.ort`), a large model's weights held
by reference (:mod:`.shared`), PyTorch export (:mod:`.torch_export`) and any Graph as a ``torch.nn.Module``
(:mod:`.torch_emit`), and the ONNX-level layout passes of the optimize portfolio (:mod:`.onnx_layout`,
:mod:`.onnx_rows`)."""
