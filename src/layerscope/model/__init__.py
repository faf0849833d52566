"""layerscope.model"""
