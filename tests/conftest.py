import os
import sys

sys.path.insert(0, os.path.dirname(__file__))  # tests/tracecheck.py and friends
os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(os.path.dirname(__file__), "..", ".venv", "inductor-cache"))
