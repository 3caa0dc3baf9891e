"""ONNX serving: a retriever exported as an ONNX graph (`export`), and the loader that runs it with onnxruntime and
tokenizers alone (`encoder`)."""
