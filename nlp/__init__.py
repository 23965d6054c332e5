"""edgescore's NLP service: a CPU transformer text classifier served with Ray Serve.

`nlp.model.TextClassifier` is the model (tokenizer + ONNX Runtime session + head), usable
without Ray; `nlp.app` wraps it in a Ray Serve application; `nlp.run` starts and stops a
local Ray head with the application on it.
"""
