"""The accountant contract's adapter for ``PrivacyBucketsAccountant`` under any
constructor arguments ``KW`` (sampler, neighbouring relation, sizes)."""
from accountant_contract import AccountantContract

from pb_accountant import PrivacyBucketsAccountant


class PbAccountantContract(AccountantContract):
    KW: dict = {}

    def make(self):
        return PrivacyBucketsAccountant(**self.KW)

    def add_steps(self, acc, noise_multiplier, sample_rate, count):
        for _ in range(count):
            acc.step(noise_multiplier=noise_multiplier, sample_rate=sample_rate)

    def epsilon_bounds(self, acc, delta):
        b = acc.get_epsilon_bounds(delta)
        return b.lower, b.upper

    def delta_bounds(self, acc, epsilon):
        b = acc.get_delta_bounds(epsilon)
        return b.lower, b.upper

    def save(self, acc):
        return acc.state_dict()

    def restore(self, state):
        acc = PrivacyBucketsAccountant(**self.KW)
        acc.load_state_dict(state)
        return acc
