"""bridge_core.ledger"""
