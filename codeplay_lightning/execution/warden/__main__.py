import gc

# no collection until the zygote has frozen what it holds (`Zygote.serve`): none is counted, and every program process
# starts with the same collector statistics
gc.disable()
from .main import main  # noqa: E402

main()
