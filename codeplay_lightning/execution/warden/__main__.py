import gc

gc.disable()  # until the zygote has started: no collection to count, so every program process starts with the same
from .main import main  # noqa: E402  # collector statistics (`Zygote.serve`)

main()
