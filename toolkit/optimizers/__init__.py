"""One module per optimizer; importing this package registers every built-in one."""
from .base import Optimizer, create, register, registry  # noqa: F401
from .sgd import SGD  # noqa: F401
from .nag import NAG  # noqa: F401
from .adagrad import AdaGrad  # noqa: F401
from .rmsprop import RMSProp  # noqa: F401
from .adadelta import AdaDelta  # noqa: F401
from .adam import Adam  # noqa: F401
from .adamax import Adamax  # noqa: F401
from .nadam import Nadam  # noqa: F401
from .signum import Signum  # noqa: F401
from .lbsgd import LBSGD  # noqa: F401
from .dcasgd import DCASGD  # noqa: F401
from .ftrl import Ftrl  # noqa: F401
from .ftml import FTML  # noqa: F401
from .sgld import SGLD  # noqa: F401
from .adamw import AdamW  # noqa: F401
from .lars import LARS  # noqa: F401
from .groupadagrad import GroupAdaGrad  # noqa: F401
from .lamb import LAMB  # noqa: F401
