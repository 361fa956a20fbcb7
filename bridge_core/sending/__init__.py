"""bridge_core.sending"""
