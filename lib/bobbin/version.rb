# frozen_string_literal: true

module Bobbin
  VERSION = "0.1.0"
end
