"""``python -m graphsub``: the same as the ``graphsub`` command."""

from graphsub.cli import main

if __name__ == "__main__":
    main()
