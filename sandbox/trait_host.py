"""The trait host's entry point in its container: ``python3 -I -S -B /opt/genesis/trait_host.py``.

The host itself is the package ``traithost`` beside this file (standard library only; its doc
has the protocol). ``-I`` leaves this file's folder off ``sys.path``, so it is put there here."""

import os
import sys

if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from traithost.supervisor import main  # type: ignore[import-not-found]  # beside this file in the image

    main()
