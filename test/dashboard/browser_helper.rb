# frozen_string_literal: true

require_relative "../operator/operator_helper"
require "capybara/minitest"
require "capybara/cuprite"
require "rack/builder"

# The dashboard in real headless Chromium (Debian's chromium, driven over CDP by Cuprite), served by Puma in this
# process: "/" is a development dashboard, "/prod" one in production without an auth hook.
Capybara.register_driver(:bobbin_chromium) do |app|
  Capybara::Cuprite::Driver.new(app, browser_path: ENV.fetch("BROWSER_PATH", "/usr/bin/chromium"), headless: true, window_size: [ 1360, 900 ],
                                     timeout: 30, process_timeout: 30, browser_options: { "no-sandbox" => nil })
end
Capybara.default_driver = :bobbin_chromium
Capybara.server = :puma, { Silent: true, Threads: "1:4" }
Capybara.default_max_wait_time = 10
Capybara.app = Rack::Builder.app do
  map("/prod") { run Bobbin::Dashboard.new(environment: "production") }
  map("/") { run Bobbin::Dashboard.new(environment: "development") }
end

class BrowserTestCase < Bobbin::TestCase
  include OperatorHelper
  include Capybara::DSL
  include Capybara::Minitest::Assertions

  SCREENSHOTS = File.join(TestProcesses::ROOT, "docs/screenshots")

  teardown do
    Capybara.reset_sessions!
  end

  # Saves the page as docs/screenshots/NAME.png (the README shows them) when BOBBIN_SCREENSHOTS is set.
  def screenshot(name)
    page.save_screenshot(File.join(SCREENSHOTS, "#{name}.png"), full: true) if ENV["BOBBIN_SCREENSHOTS"]
  end
end
