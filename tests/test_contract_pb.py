"""``PrivacyBucketsAccountant`` keeps the accountant contract (tests/accountant_contract.py)."""
from _pb_contract import PbAccountantContract


class TestPrivacyBucketsAccountantContract(PbAccountantContract):
    """Default options: Poisson sampling, add/remove neighbours."""
