"""synchronizer"""
