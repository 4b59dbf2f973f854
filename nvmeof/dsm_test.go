package nvmeof
