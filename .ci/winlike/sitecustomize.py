"""Apply the Windows-like rules (winlike.py) in every Python process started with this folder on PYTHONPATH
and BERTEMBED_WINLIKE=1: the pytest process and the ones its tests start."""

import os

if os.environ.get("BERTEMBED_WINLIKE") == "1":
    import winlike

    winlike.apply()
