"""buffer"""
